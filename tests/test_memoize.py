"""The generic per-request memo (remediation/memoize.py, php/memoize.php): which functions it
refuses and why, and that a memoized function, run by real PHP, returns what the original did
while its body runs once per distinct argument list."""
import json
import subprocess

from lockdown.analyzers.findings import Finding
from lockdown.harness.toolchain import tool
from lockdown.remediation import memoize

LIB = r"""<?php
namespace Shop;

class Sizes
{
    public static $runs = 0;

    public static function table($scale = 1)
    {
        self::$runs++;
        $name = static::class;
        if ($scale > 2) {
            return ['big' => $scale, 'by' => $name];
        }
        $double = function ($y) { return $y * 2; };
        $anon = new class { public function f() { return 'inner'; } };
        return array_map($double, [1, 2, $scale]) + ['who' => "{$name}", 'inner' => $anon->f()];
    }

    public function label($x) { return $x; }
    public static function &ref() { static $a = []; return $a; }
}

class Bigger extends Sizes {}

function subsizes($a = 1, $opts = [])
{
    $GLOBALS['runs'] = ($GLOBALS['runs'] ?? 0) + 1;
    if ($a === 'x') { return "{$a}-" . count(func_get_args()); }
    return $a and $opts;
}
function fill(array &$into) { $into[] = 1; return count($into); }
function noisy() { echo "hi"; return 1; }
function numbers() { yield 1; }
function nothing(): void { $GLOBALS['n'] = 1; }
function bare() { $GLOBALS['n'] = 2; }
function tagged($a) { $GLOBALS['tagged'] = ($GLOBALS['tagged'] ?? 0) + 1; return $a * 2 ?>
<?php }
"""

RUN = r"""<?php
require $argv[1];
use Shop\Sizes, Shop\Bigger;
$out = [];
foreach ([1, 1, 3, 1, 3, 'x', 'x', 0] as $a) { $out[] = \Shop\subsizes($a); }
$out[] = \Shop\subsizes('x', [1, [2]]);
$o = new \stdClass;
$out[] = \Shop\subsizes(1, [$o]); $out[] = \Shop\subsizes(1, [$o]);       // objects: never remembered
foreach ([1, 1, 5, 5] as $s) { $out[] = Sizes::table($s); }
foreach ([2, 2, 3] as $a) { $out[] = \Shop\tagged($a); }                  // a return ended by a closing tag
$out[] = Bigger::table(1);                                               // static::class is in the key
echo json_encode(['out' => $out, 'runs' => $GLOBALS['runs'], 'tables' => Sizes::$runs,
                  'tagged' => $GLOBALS['tagged']]), "\n";
"""

def line_of(text, name):
    """The line of `function name(` (or `function &name(`) in `text`."""
    return next(i for i, line in enumerate(text.splitlines(), 1)
                if f"function {name}(" in line or f"function &{name}(" in line)


LINES = {name: line_of(LIB, name)
         for name in ["table", "label", "ref", "subsizes", "fill", "noisy", "numbers", "nothing", "bare"]}


def _run(where, lib_text):
    """What RUN.php prints with `lib_text` as the library."""
    where.mkdir()
    (where / "lib.php").write_text(lib_text)
    (where / "run.php").write_text(RUN)
    r = subprocess.run([tool("php"), str(where / "run.php"), str(where / "lib.php")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_memoized_functions_return_the_same_and_run_once_per_argument_list(tmp_path):
    src = tmp_path / "src.php"
    src.write_text(LIB)
    text, why = memoize.memoized(src, "Shop\\subsizes", LINES["subsizes"])
    assert why == "" and text is not None
    src.write_text(text)
    text, why = memoize.memoized(src, "Shop\\Sizes::table", LINES["table"])
    assert why == "" and text is not None
    src.write_text(text)
    text, why = memoize.memoized(src, "Shop\\tagged", line_of(text, "tagged"))
    assert why == "" and text is not None
    # the lookup is inserted as lines of its own: every original line keeps its order
    assert [ln for ln in text.splitlines() if "lockdown" not in ln and ln.strip()][:5] == \
        [ln for ln in LIB.splitlines() if ln.strip()][:5]
    before = _run(tmp_path / "original", LIB)
    after = _run(tmp_path / "memoized", text)
    assert after["out"] == before["out"]
    # subsizes: 1, 3, 'x', 0 and ('x', [1, [2]]) once each; the two calls with an object both run
    assert (before["runs"], after["runs"]) == (11, 7)
    # table: 1 and 5 on Sizes, and 1 again on Bigger (a different static::class)
    assert (before["tables"], after["tables"]) == (5, 3)
    assert after["out"][-1]["who"] == "Shop\\Bigger"
    assert (before["tagged"], after["tagged"]) == (3, 2)


def test_functions_a_memo_would_change_are_refused_with_the_reason(tmp_path):
    src = tmp_path / "lib.php"
    src.write_text(LIB)
    refused = {name: memoize.memoized(src, fn, LINES[name])[1] for name, fn in [
        ("label", "Shop\\Sizes::label"), ("ref", "Shop\\Sizes::ref"), ("fill", "Shop\\fill"),
        ("noisy", "Shop\\noisy"), ("numbers", "Shop\\numbers"), ("nothing", "Shop\\nothing"),
        ("bare", "Shop\\bare")]}
    assert refused["label"].startswith("an instance method")
    assert refused["ref"] == "it returns by reference"
    assert refused["fill"] == "it takes a parameter by reference"
    assert refused["noisy"].startswith("it prints output (T_ECHO on line")
    assert refused["numbers"] == "a generator (yield)"
    assert refused["nothing"] == "it returns nothing (void)"
    assert refused["bare"] == "it has no return with a value"
    assert memoize.memoized(src, "Shop\\subsizes", LINES["subsizes"] + 1)[1].startswith("no definition of subsizes")
    assert src.read_text() == LIB


def _finding(function, located, calls=90):
    return Finding("repeated-call", "t", "medium", 5.0, "s",
                   details={"function": function, "probe": {"function": function, "located": located,
                                                           "calls": calls, "repeats": calls and calls - 3}})


def test_proposal_is_a_checked_diff_of_a_patchable_file_or_says_why_not(tmp_path):
    app = tmp_path / "app"
    (app / "inc").mkdir(parents=True)
    (app / "inc" / "lib.php").write_text(LIB)
    f = _finding("Shop\\subsizes", f"inc/lib.php:{LINES['subsizes']}")
    (r,) = memoize.propose(f, ["inc/lib.php"], app)
    assert r.kind == "diff" and r.file == "inc/lib.php" and r.checked.startswith("applies cleanly")
    assert "+    static $lockdown_memo = array();" in r.content
    assert "generic per-request memo of Shop\\subsizes" in r.description
    assert (app / "inc" / "lib.php").read_text() == LIB          # proposed, never applied
    # not patchable, refused, or not probed: no diff; the first two say why
    g = _finding("Shop\\subsizes", f"inc/lib.php:{LINES['subsizes']}")
    assert memoize.propose(g, ["other.php"], app) == []
    assert "inc/lib.php is not one of the target's patchable files" in g.details["no_patch"]
    h = _finding("Shop\\noisy", f"inc/lib.php:{LINES['noisy']}")
    assert memoize.propose(h, ["inc/lib.php"], app) == []
    assert h.details["no_patch"].startswith("no per-request memo of Shop\\noisy: it prints output")
    for unprobed in (_finding("Shop\\subsizes", "inc/lib.php:36", calls=None),
                     _finding("Shop\\subsizes", "a.php:1, inc/lib.php:36")):
        assert memoize.propose(unprobed, ["inc/lib.php"], app) == [] and "no_patch" not in unprobed.details
