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
const KEEP_TABLE = false;
function money($cents, $cur)
{
    $t = &\Counter::$hits;
    $key = $cents . $cur;
    if (!isset($GLOBALS['seen'][$key])) {
        $GLOBALS['seen'][$key] = true;
    }
    static $cached = null;
    if (KEEP_TABLE && $cached !== null) {
        $table = $cached;
    } else {
        $table = array();
        $lines = explode("\n", RATES);
        $header = str_getcsv(array_shift($lines));
        foreach ($lines as $line) {
            $row = array_combine($header, str_getcsv($line));
            $table[$row['code']] = $row;
        }
        $t['setups']++;
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
    \Counter::$n++;
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
            \Counter::$n++;
        }
        return trim(preg_replace('/[^a-z0-9]+/', $this->sep, strtr(mb_strtolower($text), $map)), $this->sep);
    }
}
""", "(new \\App\\Format\\Slugger())->slug('Über Straße ' . %s . ' x' . %s)"),
}
def run_calls(root, rel: str, call: str, n: int = 7) -> dict:
    script = root / "run.php"
    script.write_text("<?php\nnamespace {\n"
                      "class Counter { public static $n = 0; public static $hits = ['setups' => 0]; }\n"
                      f"require __DIR__ . '/{rel}';\n$out = [];\n"
                      f"for ($i = 0; $i < {n}; $i++) {{ $out[] = {call % ('$i', '$i')}; }}\n"
                      "echo json_encode(['out' => $out, 'setups' => Counter::$n + Counter::$hits['setups']]),"
                      " \"\\n\";\n}\n")
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
                                    "  return count($m);\n}\n", "passes it $src, made from the call's arguments"),
    "fills what the call filled": ("function f($n) {\n  $m = [$n];\n  foreach (explode(',', 'a,b') as $x) "
                                   "{ $m[] = $x; }\n  return count($m);\n}\n", "depends on the call"),
    "indexes with a parameter": ("function f($k) {\n  $t = [];\n  $t[$k] = explode(',', 'a,b');\n"
                                 "  return isset($t[$k]);\n}\n", "reads $k, which depends on the call"),
    "a subscript written with a parameter before": ("function f($k) {\n  $m = [];\n  $m[$k] = 1;\n"
                                                    "  $n = explode(',', implode(',', array_keys($m)));\n"
                                                    "  return count($n);\n}\n",
                                                    "passes it $m, made from the call's arguments"),
    "fills a by-reference parameter": ("function f(&$out) {\n  $n = 0;\n  foreach (explode(',', 'a,b') as $w) "
                                       "{ $out[] = $w; $n++; }\n  return $n;\n}\n",
                                       "writes into $out, a parameter"),
    "filled by reference before": ("function f($s) {\n  preg_match('/(\\w+)/', $s, $m);\n"
                                   "  $parts = explode(',', $m[1]);\n  return count($parts);\n}\n",
                                   "passes it $m, made from the call's arguments"),
    "a static counted outside": ("function f($s) {\n  static $calls = 0;\n  $calls++;\n"
                                 "  $parts = explode(',', str_repeat('a,', $calls));\n"
                                 "  return count($parts) . $s;\n}\n",
                                 "reads $calls, which depends on the call"),
    "a global": ("function f($s) {\n  global $sep;\n  $parts = explode($sep, 'a,b');\n"
                 "  return count($parts) . $s;\n}\n",
                 "reads $sep, which depends on the call"),
    "func_get_args": ("function f($s) {\n  $parts = explode(',', func_get_args()[0]);\n  return count($parts);\n}\n",
                      "calls func_get_args"),
    "makes an object": ("function f($s) {\n  $o = new ArrayObject(explode(',', 'a,b'));\n  $o->append($s);\n"
                        "  return count($o);\n}\n", "makes an object"),
    "prints with a function": ("function f($s) {\n  $parts = [];\n  foreach (explode(',', 'a,b') as $x) "
                               "{ printf('%s', $x); $parts[] = $x; }\n  return count($parts) . $s;\n}\n",
                               "calls printf"),
    "calls the app": ("function f($s) {\n  $parts = array_map('trim', explode(',', log_it('a,b')));\n"
                      "  return count($parts) . $s;\n}\n", "calls log_it"),
    "calls a method": ("function f($s) {\n  $parts = explode(',', Config::get('list'));\n"
                       "  return count($parts) . $s;\n}\n",
                       "calls a method or a callable"),
    "prints": ("function f($n) {\n  foreach (explode(',', 'a,b') as $x) { echo $x; }\n  return $n;\n}\n",
               "prints"),
    "alternative syntax": ("function f($n) {\n  if ($n): $m = explode(',', 'a'); endif;\n  return $n;\n}\n",
                           "alternative syntax"),
    "uses nothing after": ("function f($n) {\n  $m = explode(',', 'a,b');\n  return $n;\n}\n",
                           "assigns nothing the rest of the function uses"),
}


def test_a_block_and_the_statement_after_it_are_two():
    """`if (..) { .. }` then `[$a, $b] = explode(..)`: the setup is the second alone, and the
    first still runs on every call."""
    body = ("<?php\nfunction f($s) {\n  if ($s === 'x') { $s = 'y'; }\n  [$a, $b] = explode(',', 'p,q');\n"
            "  return $a . $b . $s;\n}\n")
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        _, (r,) = patched(Path(d), "lib/f.php", body, setup_finding("f", ["explode"]))
    assert "-  [$a, $b] = explode(',', 'p,q');" in r.content and "-  if ($s === 'x')" not in r.content


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


# The loop works on the call's data (refuted: the finding is dismissed), or does not (kept):
# a false refutation would hide a real setup, so every idiom that only looks like one is kept.
FED = {
    "hashes what the argument made": ("function f($c) {\n  $seed = strtolower($c);\n  for ($i = 0; $i < 9; $i++) "
                                      "{ $seed = hash('sha256', $seed . $i); }\n  return $seed;\n}\n",
                                      ["hash"], True),
    "the argument read first, the table parsed after": (
        "function f($key) {\n  [$ns, $name] = explode('.', $key);\n  $t = [];\n"
        "  foreach (explode(\"\\n\", \"a=1\\nb=2\") as $line) { [$k, $v] = explode('=', $line); $t[$k] = $v; }\n"
        "  return $t[$name] ?? $ns;\n}\n", ["explode"], False),
    "a loop variable named as one the argument made": (
        "function f($input) {\n  $line = trim($input);\n"
        "  $t = array_map(fn($line) => str_getcsv($line), explode(\"\\n\", \"a,1\\nb,2\"));\n"
        "  return count($t) . $line;\n}\n", ["str_getcsv"], False),
    "foreach binds the name afresh": (
        "function f($input) {\n  $line = trim($input);\n  $t = [];\n"
        "  foreach (explode(\"\\n\", \"a,1\\nb,2\") as $line) { $t[] = str_getcsv($line); }\n"
        "  return count($t);\n}\n", ["str_getcsv"], False),
    "overwritten with a constant": (
        "function f($opts) {\n  $sep = $opts['sep'] ?? ',';\n  $sep = ',';\n"
        "  $t = array_map(fn($l) => str_getcsv($l, $sep), explode(\"\\n\", \"a,1\\nb,2\"));\n"
        "  return count($t);\n}\n", ["str_getcsv"], False),
    "an output argument": (
        "function f($key) {\n  preg_match_all('/\\w/', $key, $m);\n  $t = [];\n"
        "  foreach (explode(';', 'a=1;b=2') as $pair) { preg_match('/(\\w)=(\\d)/', $pair, $m); $t[] = $m; }\n"
        "  return count($t);\n}\n", ["preg_match"], False),
}


@pytest.mark.parametrize("case", sorted(FED))
def test_a_loop_fed_by_the_arguments_is_refuted_and_only_then(tmp_path, case):
    body, loops, refuted = FED[case]
    finding = setup_finding("f", loops)
    patched(tmp_path, "lib/f.php", "<?php\n" + body, finding)
    assert bool(finding.details.get("refuted")) is refuted, finding.details


def test_a_variable_read_in_a_string_as_dollar_brace_depends_on_the_call(tmp_path):
    """`"${s}"` is tokenized as T_STRING_VARNAME, not a variable: it was missed, and the setup
    kept the first call's value for every call."""
    finding = setup_finding("f", ["explode"])
    _, made = patched(tmp_path, "lib/f.php", "<?php\nfunction f($s) {\n  $t = explode(',', \"a,b,${s}\");\n"
                                             "  return implode('|', $t);\n}\n", finding)
    assert made == [] and "$s" in finding.details["no_patch"], finding.details
