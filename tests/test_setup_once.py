"""per-call-setup's generated remediation (remediation/generate.py setup_once, php/setup_once.php):
the statement that runs the setup's loop runs on the first call of a request only, its results
kept in a static. Each idiom below is patched on a copy, passes `php -l` (checked by propose),
and is then run: every call returns what it returned before, and the setup runs once. The
refusals say why and still say where (no_patch, details.located)."""
from __future__ import annotations

import json
import subprocess

import pytest

from lockdown.analyzers.findings import Finding
from lockdown.harness.toolchain import tool
from lockdown.remediation import generate

SOURCES = {
    # procedural, a counter through a reference into $GLOBALS, the setup inside an if/else
    "procedural": ("lib/money.php", "money", ["str_getcsv", "array_combine"], r"""<?php
const RATES = "code,minor,symbol\nEUR,2,e\nUSD,2,$\nJPY,0,y";
function money($cents, $cur)
{
    $t = &$GLOBALS['setups'];
    $key = $cents . $cur;
    if (!isset($GLOBALS['seen'][$key])) {
        $GLOBALS['seen'][$key] = true;
    }
    static $cached = null;
    if (getenv('NEVER_SET') && $cached !== null) {
        $table = $cached;
    } else {
        $table = array();
        $lines = explode("\n", RATES);
        $header = str_getcsv(array_shift($lines));
        foreach ($lines as $line) {
            $row = array_combine($header, str_getcsv($line));
            $table[$row['code']] = $row;
        }
        $t++;
        $cached = $table;
    }
    $c = $table[$cur];
    return $c['symbol'] . number_format($cents / 10 ** $c['minor'], (int) $c['minor']);
}
""", "money(%s, ['EUR', 'USD', 'JPY'][%s %% 3])"),
    # a plain loop filling an array made by the statement before it
    "filled": ("src/units.php", "unit_label", ["explode", "trim"], r"""<?php
function unit_label(string $unit): string {
  $labels = [];
  foreach (explode("\n", "kg=kilogram\ng=gram\nl=litre\nm=metre") as $pair) {
    [$k, $v] = explode('=', trim($pair));
    $labels[$k] = $v;
    $GLOBALS['setups'] = ($GLOBALS['setups'] ?? 0) + 1;
  }
  return $labels[$unit] ?? $unit;
}
""", "unit_label(['kg', 'g', 'l', 'm', 'x'][%s %% 5]) . %s"),
    # a namespaced class: an instance method whose setup names no $this, its per-call part does
    "method": ("src/Format/Slugger.php", "App\\Format\\Slugger::slug", ["mb_strtolower"], r"""<?php
namespace App\Format;

final class Slugger
{
    private const TABLE = ['Ä' => 'ae', 'Ö' => 'oe', 'Ü' => 'ue', 'ß' => 'ss'];
    private string $sep = '-';

    public function slug(string $text): string
    {
        $map = [];
        foreach (array_map(fn ($k) => mb_strtolower($k), array_keys(self::TABLE)) as $i => $k) {
            $map[$k] = array_values(self::TABLE)[$i];
            \App\bump();
        }
        return trim(preg_replace('/[^a-z0-9]+/', $this->sep, strtr(mb_strtolower($text), $map)), $this->sep);
    }
}
""", "(new \\App\\Format\\Slugger())->slug('Über Straße ' . %s . ' x' . %s)"),
}
HELPERS = "namespace App { function bump() { $GLOBALS['setups'] = ($GLOBALS['setups'] ?? 0) + 1; } }\n"


def run_calls(root, rel: str, call: str, n: int = 7) -> dict:
    script = root / "run.php"
    script.write_text("<?php\n" + (HELPERS if "App\\" in call else "") + "namespace {\n"
                      f"require __DIR__ . '/{rel}';\n$GLOBALS['setups'] = 0;\n$out = [];\n"
                      f"for ($i = 0; $i < {n}; $i++) {{ $out[] = {call % ('$i', '$i')}; }}\n"
                      "echo json_encode(['out' => $out, 'setups' => $GLOBALS['setups']]), \"\\n\";\n}\n")
    r = subprocess.run([tool("php"), "-n", "-d", "extension=mbstring", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def setup_finding(function: str, loops: list[str]) -> Finding:
    return Finding("per-call-setup", "t", "medium", 9.0, "s",
                   details={"function": function, "loops": [{"builtin": b, "per_call": 4} for b in loops],
                            "no_patch": "where the setup ends is the app's"})


def patched(tmp_path, rel: str, text: str, finding: Finding):
    app = tmp_path / "app"
    (app / rel).parent.mkdir(parents=True, exist_ok=True)
    (app / rel).write_text(text)
    made = generate.propose(finding, ["lib/*.php", "src/**/*.php", "src/*.php"], app)
    return app, made


@pytest.mark.parametrize("idiom", sorted(SOURCES))
def test_the_setup_runs_once_and_every_call_returns_the_same(tmp_path, idiom):
    rel, function, loops, text, call = SOURCES[idiom]
    app, made = patched(tmp_path, rel, text, setup_finding(function, loops))
    before = run_calls(app, rel, call)
    per_setup = {"procedural": 1, "filled": 4, "method": 4}[idiom]
    assert before["setups"] == 7 * per_setup                    # the setup on every call
    (r,) = made
    assert (r.kind, r.origin, r.file) == ("diff", "generated", rel) and "passes php -l" in r.checked
    assert "run on the first call of each request only" in r.description
    subprocess.run(["patch", "-p1", "-s"], input=r.content, text=True, cwd=app, check=True)
    after = run_calls(app, rel, call)
    assert after["out"] == before["out"]
    assert after["setups"] == per_setup                         # once per request


def test_what_the_setup_writes_beside_its_results_is_stated(tmp_path):
    rel, function, loops, text, _ = SOURCES["procedural"]
    _, (r,) = patched(tmp_path, rel, text, setup_finding(function, loops))
    assert "its results ($table)" in r.description and "what it writes into $t" in r.description
    assert "+    static $lockdown_setup = null;" in r.content


REFUSED = {
    "reads a parameter": ("function f($list) {\n  $m = [];\n"
                          "  foreach (explode(',', $list) as $x) { $m[] = trim($x); }\n"
                          "  return count($m);\n}\n", "reads $list, which depends on the call"),
    "reads what a parameter made": ("function f($n) {\n  $src = str_repeat('a,', $n);\n  $m = explode(',', $src);\n"
                                    "  return count($m);\n}\n", "reads $src, which depends on the call"),
    "fills what the call filled": ("function f($n) {\n  $m = [$n];\n  foreach (explode(',', 'a,b') as $x) "
                                   "{ $m[] = $x; }\n  return count($m);\n}\n",
                                   "adds to $m, which holds what depends on the call"),
    "prints": ("function f($n) {\n  foreach (explode(',', 'a,b') as $x) { echo $x; }\n  return $n;\n}\n",
               "prints"),
    "alternative syntax": ("function f($n) {\n  if ($n): $m = explode(',', 'a'); endif;\n  return $n;\n}\n",
                           "alternative syntax"),
    "uses nothing after": ("function f($n) {\n  $m = explode(',', 'a,b');\n  return $n;\n}\n",
                           "assigns nothing the rest of the function uses"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_no_diff_when_the_setup_may_depend_on_the_call_and_where_is_said(tmp_path, case):
    body, why = REFUSED[case]
    finding = setup_finding("f", ["explode", "trim"])
    _, made = patched(tmp_path, "lib/f.php", "<?php\n" + body, finding)
    assert made == []
    assert why in finding.details["no_patch"], finding.details["no_patch"]
    assert finding.details["located"] == "lib/f.php:2" and "Where: f is defined at lib/f.php:2" in \
        finding.details["no_patch"]


def test_a_file_outside_patchable_gets_no_diff(tmp_path):
    rel, function, loops, text, _ = SOURCES["filled"]
    app = tmp_path / "app"
    (app / rel).parent.mkdir(parents=True)
    (app / rel).write_text(text)
    finding = setup_finding(function, loops)
    assert generate.propose(finding, ["lib/*.php"], app) == []
    assert "not one of the target's patchable files" in finding.details["no_patch"]
