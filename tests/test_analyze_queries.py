"""`lockdown analyze --queries N|all`: how many query classes the digest shows, and their ids
in pt-query-digest's form (`ID 0x` + the upper-case hex MD5 of the fingerprint, as its report
header prints it), on a recorded bundle."""
import hashlib
import json
import re

from click.testing import CliRunner

from conftest import REPO
from lockdown.cli.main import main

BUNDLE = REPO / "fixtures" / "golden" / "minicms" / "bundle"


def _digest_rows(out: str) -> list[str]:
    section = out[out.index("query digest ("):]
    return [line for line in section.splitlines() if re.match(r"  0x[0-9A-F]{32} ", line)]


def _run(*args):
    r = CliRunner().invoke(main, ["analyze", str(BUNDLE), *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_queries_n_all_and_the_default():
    every = json.loads(_run("--json", "--queries", "all"))["queries"]
    n = every["class_count"]
    assert n == len(every["classes"]) and n > 3
    assert len(_digest_rows(_run("--queries", "3"))) == 3
    assert "the top 3 shown (--queries all for every one)" in _run("--queries", "3")
    assert len(_digest_rows(_run("--queries", "all"))) == n
    assert len(_digest_rows(_run("--top", "2"))) == 2          # the default follows --top
    assert len(_digest_rows(_run("--top", "2", "--queries", "ALL"))) == n
    assert len(json.loads(_run("--json", "--queries", "2"))["queries"]["classes"]) == 2


def test_ids_are_printed_as_pt_query_digest_prints_them():
    classes = json.loads(_run("--json", "--queries", "all"))["queries"]["classes"]
    rows = _digest_rows(_run("--queries", "all"))
    for c, row in zip(classes, rows):
        md5 = hashlib.md5(c["fingerprint"].encode()).hexdigest().upper()
        assert c["id"] == md5                                   # the review table's form, in JSON
        assert row.split()[0] == "0x" + md5                     # the report's `ID 0x...`


def test_bad_queries_values_are_usage_errors():
    for value in ("0", "-1", "some"):
        r = CliRunner().invoke(main, ["analyze", str(BUNDLE), "--queries", value])
        assert r.exit_code == 2, (value, r.output)
        assert "Invalid value for '--queries'" in r.stderr and "or all" in r.stderr
