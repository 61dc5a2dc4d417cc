"""The run directory's model and store (lockdown/rundir/): each document read back is the JSON
it was read from, key for key and in order; a document made in code is written as `lockdown
run` always wrote it; a damaged or foreign file is one RunDirError line naming it, whichever
reader asks. A hand-made run directory (tests/test_report_numbers.py), no server."""
from __future__ import annotations

import copy
import json

import pytest

from lockdown.analyzers.findings import Finding, Remediation
from lockdown.analyzers import accounting as A
from lockdown.rundir.model import (ACCOUNTING_FORMAT, ANALYSIS_FORMAT, DEFAULT_REQUESTS, DEFAULT_XHPROF_EVERY, Analysis,
                                   BenchResult, DocumentError, RunDocument, RunSettings, TimeAccounting, Verification)
from lockdown.rundir.store import (ACCOUNTING, BENCH, FINDINGS, RunDirError, open_run, read_document, write_document)
from test_accounting import URLS, nested_findings, nested_slices
from test_report_numbers import VERIFY_ALL, make_run


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path / "run")


def _json(path):
    return json.loads(path.read_text())


def test_each_document_reads_back_as_it_was_written(run):
    for name, kind in (("findings.json", RunDocument), ("bench.json", BenchResult), ("analysis.json", Analysis),
                       ("verify/all/verify.json", Verification)):
        data = _json(run / name)
        doc = kind.from_json(data)
        assert doc.to_json() == data and list(doc.to_json()) == list(data), name
        if kind is not RunDocument:     # (findings are written as Finding.to_json orders them, as run writes them)
            assert json.dumps(doc.to_json()) == json.dumps(data), name      # the same keys, in the same order
    # keys no type names (a newer writer's) are kept, where they were
    data = _json(run / "bench.json")
    data = {"newer": {"a": [1]}, **data, "later": None}
    assert list(BenchResult.from_json(data).to_json()) == list(data)
    extra = BenchResult.from_json(data).extra
    assert extra["newer"] == {"a": [1]} and extra["later"] is None and "runs" not in extra


def test_the_run_document_is_written_as_lockdown_run_wrote_it(tmp_path):
    f = Finding("fs-scan", "t", "high", 12.5, "s", remediations=[Remediation("sql", "DELETE FROM x")], key="fs-scan")
    doc = RunDocument(target="minicms", bundle="/r/bundle",
                      run=RunSettings(target_dir="/apps/minicms", php_ini={"opcache.enable": "1"}, requests=60,
                                      xhprof_every=10, thresholds={"fs-scan": {"min": 1}}, target_arg="minicms",
                                      options=["--requests", "60"]),
                      findings=[f], dismissed=[{"id": "repeated-call", "reason": "r"}])
    old = {"format": 1, "target": "minicms", "bundle": "/r/bundle",
           "run": {"target_dir": "/apps/minicms", "php_ini": {"opcache.enable": "1"}, "requests": 60,
                   "xhprof_every": 10, "thresholds": {"fs-scan": {"min": 1}}, "target_arg": "minicms",
                   "options": ["--requests", "60"]},
           "findings": [f.to_json()], "dismissed": [{"id": "repeated-call", "reason": "r"}]}
    assert json.dumps(doc.to_json()) == json.dumps(old)      # base only when the run had one
    based = copy.deepcopy(doc)
    based.run.base = {"source": "/v/all", "php_ini": {}, "remediations": [Remediation("sql", "x").__dict__]}
    assert list(based.to_json()["run"])[-1] == "base"
    write_document(tmp_path, FINDINGS, doc)
    assert (tmp_path / FINDINGS).read_text() == json.dumps(old, indent=2, ensure_ascii=False) + "\n"
    again = RunDocument.from_json(_json(tmp_path / FINDINGS))
    assert again.findings == [f] and again.settings.requests == 60


def test_an_older_run_block_means_the_defaults(run):
    data = _json(run / "findings.json")
    del data["run"]
    doc = RunDocument.from_json(data)
    assert doc.run is None and "run" not in doc.to_json()
    assert (doc.settings.capture_requests, doc.settings.capture_xhprof_every) == (DEFAULT_REQUESTS,
                                                                                  DEFAULT_XHPROF_EVERY)
    assert RunDocument.from_json({**data, "run": {"requests": 40}}).settings.capture_requests == 40


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(format=2), "not a findings file of format 1 (format 2)"),
    (lambda d: d.pop("format"), "format missing"),
    (lambda d: d.update(format=True), "format true"),
    (lambda d: d.pop("target"), "no target"),
    (lambda d: d.update(findings={"a": 1}), "findings is not a list"),
    (lambda d: d["findings"][0].update(share_pct="x"), 'findings[0].share_pct is not a number or null ("x")'),
    (lambda d: d["findings"][0].update(key="../escape"), "findings[0].key is \"../escape\", not a finding's key"),
    (lambda d: d["findings"][1]["remediations"][0].pop("content"), "no findings[1].remediations[0].content"),
    (lambda d: d["run"].update(requests=0), "in run: requests is 0, not a positive count"),
    (lambda d: d["run"].update(php_ini={"a": 1}), "run.php_ini is not an object of strings"),
    (lambda d: d["run"].update(base={"source": None, "php_ini": {}}), "in run: no base.remediations"),
])
def test_a_damaged_run_document_names_the_field(run, change, says):
    data = _json(run / "findings.json")
    change(data)
    with pytest.raises(DocumentError) as e:
        RunDocument.from_json(data)
    assert says in str(e.value)


def test_unknown_fields_of_a_finding_are_left_out(run):
    data = _json(run / "findings.json")
    data["findings"][0]["newer"] = 1
    assert RunDocument.from_json(data).findings[0].key == "fs-scan"


def test_bench_and_analysis_carry_no_format_key_until_another_one(run):
    for kind, name in ((BenchResult, "bench.json"), (Analysis, "analysis.json")):
        data = _json(run / name)
        assert "format" not in kind.from_json(data).to_json()
        assert kind.from_json({**data, "format": 1}).to_json()["format"] == 1
        with pytest.raises(DocumentError, match="format 2"):
            kind.from_json({**data, "format": 2})
    assert ANALYSIS_FORMAT == 1
    with pytest.raises(DocumentError, match="no runs"):
        BenchResult.from_json({"target": "x"})
    with pytest.raises(DocumentError, match=r"runs is not a list of objects \(\[1, \"x\"\]\)"):
        BenchResult.from_json({"runs": [1, "x"]})
    a = _json(run / "analysis.json")
    with pytest.raises(DocumentError, match="budget_by_url is not an object"):
        Analysis.from_json({**a, "budget_by_url": []})
    with pytest.raises(DocumentError, match="queries is not an object"):
        Analysis.from_json({**a, "queries": "x"})


def test_a_verification_of_several_findings_says_which_went(run):
    v = Verification.from_json(copy.deepcopy(VERIFY_ALL))
    assert v.key == "all" and v.together and v.reprofile.gone_by_finding == {"fs-scan": True, "n-plus-one": False}
    bare = {"finding": {"key": "all"}, "findings": [{"key": "fs-scan"}, {"key": "n-plus-one"}], "bench": {},
            "reprofile": {"gone": True}}
    with pytest.raises(DocumentError, match="no reprofile.gone_by_finding"):
        Verification.from_json(bare)
    with pytest.raises(DocumentError, match="not a verification of format 1"):
        Verification.from_json({**VERIFY_ALL, "format": "1"})
    with pytest.raises(DocumentError, match="no finding.key"):
        Verification.from_json({**VERIFY_ALL, "finding": {"title": "t"}})
    with pytest.raises(DocumentError, match="no reprofile"):
        Verification.from_json({k: v for k, v in VERIFY_ALL.items() if k != "reprofile"})


def test_open_run_reads_what_is_asked_for(run):
    r = open_run(run)
    assert r.document.target == "wordpress" and [f.key for f in r.document.findings] == ["fs-scan", "n-plus-one",
                                                                                          "hot-builtins"]
    assert r.bench().runs and r.analysis().requests == 2 and r.bundle_dir == run / "bundle"
    assert list(r.verifications()) == ["all"] and r.verification_path("all") == run / "verify/all/verify.json"
    assert r.manifest()["target"]["name"] == "wordpress" and r.open_bundle().root == run / "bundle"
    (run / "bench.json").unlink()
    assert open_run(run).bench() is None            # `lockdown run --no-bench`


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


def test_a_damaged_file_is_one_line_naming_it_whoever_reads_it(run, tmp_path):
    with pytest.raises(RunDirError) as e:
        open_run(tmp_path / "nowhere")
    assert "no such directory" in one_line(e)
    with pytest.raises(RunDirError) as e:
        open_run(tmp_path)
    assert f"{tmp_path} has no findings.json" in one_line(e)
    (run / "incomplete.json").write_text("{}")
    with pytest.raises(RunDirError) as e:
        open_run(run)
    assert "did not finish" in one_line(e)
    (run / "incomplete.json").unlink()
    # a verification is read when asked for: findings.json alone opens the run (verify's lookup)
    (run / "verify" / "all" / "verify.json").write_text('{"finding": ')
    r = open_run(run)
    with pytest.raises(RunDirError) as e:
        r.verifications()
    assert one_line(e).startswith(f"{run / 'verify/all/verify.json'}: damaged JSON")
    assert f"run `lockdown verify` for this finding again or remove {run / 'verify/all'}" in str(e.value)
    # its finding is the directory's
    write = dict(VERIFY_ALL, finding={**VERIFY_ALL["finding"], "key": "other"})
    (run / "verify" / "all" / "verify.json").write_text(json.dumps(write))
    with pytest.raises(RunDirError) as e:
        open_run(run).verifications()
    assert "the verification of 'other', in the directory of 'all'" in one_line(e)
    # hidden directories (a verify in progress) and directories without verify.json hold none
    (run / "verify" / "all").rename(run / "verify" / ".all.tmp-1")
    (run / "verify" / "empty").mkdir()
    assert open_run(run).verifications() == {}
    for name, text, says in ((BENCH, '{"runs": 3}', "runs is not a list"), ("analysis.json", "[]", "not a JSON object"),
                             (FINDINGS, '{"format": 1, "findings": [', "damaged JSON")):
        whole = (run / name).read_text()
        (run / name).write_text(text)
        with pytest.raises(RunDirError) as e:
            r = open_run(run)
            r.bench(), r.analysis()
        assert one_line(e).startswith(f"{run / name}: ") and says in str(e.value), str(e.value)
        assert "run `lockdown run TARGET -o DIR` again to rewrite it" in str(e.value)
        (run / name).write_text(whole)


def test_the_bundle_is_the_run_directorys_own_copy_first(run, tmp_path):
    import shutil
    copy_dir = tmp_path / "copy"
    shutil.copytree(run, copy_dir)
    assert open_run(copy_dir).bundle_dir == copy_dir / "bundle"
    shutil.rmtree(copy_dir / "bundle")
    assert open_run(copy_dir).bundle_dir == run / "bundle"       # where findings.json says it was captured
    shutil.rmtree(run / "bundle")
    with pytest.raises(RunDirError) as e:
        open_run(copy_dir).open_bundle()
    assert one_line(e).startswith(f"{copy_dir / 'bundle'}: missing")
    assert open_run(copy_dir).manifest() == {}


def test_read_document_leaves_a_missing_optional_file(tmp_path):
    assert read_document(BenchResult, tmp_path / "bench.json", "redo", required=False) is None
    with pytest.raises(RunDirError, match="missing"):
        read_document(BenchResult, tmp_path / "bench.json", "redo")


# ----------------------------------------------------------------------------- accounting.json

def accounted() -> A.Accounting:
    """A small accounting of nested findings (tests/test_accounting.py), with a source."""
    got = A.account(nested_slices(), URLS, nested_findings())
    got.findings_source = "the run's findings (findings.json), after the argument probe"
    return got


def test_the_accounting_is_written_and_read_back_as_the_analyzer_made_it(tmp_path):
    acc = accounted()
    doc = TimeAccounting.of(acc)
    want = {"format": ACCOUNTING_FORMAT, **acc.to_json()}
    assert json.dumps(doc.to_json()) == json.dumps(want)          # the same keys, in the same order
    write_document(tmp_path, ACCOUNTING, doc)
    data = _json(tmp_path / ACCOUNTING)
    assert data == want and list(data)[0] == "format"
    again = read_document(TimeAccounting, tmp_path / ACCOUNTING, "redo")
    assert json.dumps(again.to_json()) == json.dumps(want)
    # typed all the way down: URLs, their top, findings, hotspots of each kind
    assert [u.url for u in again.urls] == ["/a", "/b"] and again.urls[0].top[0].kind == "self"
    assert {f.key for f in again.findings} == {"repeated-call", "repeated-call-2", "fs-scan"}
    assert again.informational == ["hot-builtins"] and again.hotspots.self[0].name == "helper"
    assert again.hotspots.inclusive and again.hotspots.builtin_family == []       # no perf: no native kinds
    # explained + unexplained = the sampled time, overall and per URL, the shares 100% within rounding
    for part in [again, *again.urls]:
        assert abs(part.explained_us + part.unexplained_us - part.total_us) <= 0.2
        assert abs(part.explained_pct + part.unexplained_pct - 100.0) <= 0.01 + 1e-9
    # a newer writer's keys are kept where they were
    newer = {**want, "later": [1]}
    newer["hotspots"] = {**newer["hotspots"], "autoload": []}
    assert json.dumps(TimeAccounting.from_json(newer).to_json()) == json.dumps(newer)


@pytest.mark.parametrize("change, says", [
    (lambda d: d.pop("format"), "not a time accounting of format 1 (format missing)"),
    (lambda d: d.update(format=2), "not a time accounting of format 1 (format 2)"),
    (lambda d: d.pop("total_us"), "no total_us"),
    (lambda d: d.update(explained_pct="92%"), 'explained_pct is not a number or null ("92%")'),
    (lambda d: d.update(explained_us=d["explained_us"] + 1000), "explained_us + unexplained_us is"),
    (lambda d: d.update(unexplained_us=-5.0, explained_us=d["total_us"] + 5.0), "unexplained_us is -5, below zero"),
    (lambda d: d["urls"][1].update(unexplained_us=0.0), "in urls[1]: explained_us + unexplained_us is"),
    (lambda d: d["urls"][0]["top"][0].update(path="a;b"), "urls[0].top[0].path is not a list of strings"),
    (lambda d: d["hotspots"]["self"][0].pop("name"), "no hotspots.self[0].name"),
    (lambda d: d.update(hotspots=[]), "hotspots is not a JSON object"),
    (lambda d: d["findings"][0].update(owned_us=None), "findings[0].owned_us is not a number"),
])
def test_a_damaged_accounting_names_the_field(change, says):
    data = {"format": ACCOUNTING_FORMAT, **accounted().to_json()}
    change(data)
    with pytest.raises(DocumentError) as e:
        TimeAccounting.from_json(data)
    assert says in str(e.value), str(e.value)


def test_open_run_reads_the_accounting_when_there_is_one(run):
    assert open_run(run).accounting() is None               # a run written before accounting.json
    write_document(run, ACCOUNTING, TimeAccounting.of(accounted()))
    assert open_run(run).accounting().hotspots.self[0].name == "helper"
    (run / ACCOUNTING).write_text('{"format": 1, "basis": ')
    with pytest.raises(RunDirError) as e:
        open_run(run).accounting()
    assert one_line(e).startswith(f"{run / ACCOUNTING}: damaged JSON")
    assert "run `lockdown run TARGET -o DIR` again to rewrite it" in str(e.value)
    (run / ACCOUNTING).write_text('{"format": 1, "basis": "excimer-wall"}')
    with pytest.raises(RunDirError, match="accounting.json: no perf"):
        open_run(run).accounting()
