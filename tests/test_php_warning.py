"""php-warning and write-on-read's log-write cause on synthetic contexts; the capture side
(the prepend's error handler) on a real php-fpm in test_bulletin.py."""
import pytest

from contexts import context, request, statement
from lockdown.analyzers.detectors import php_warning, write_on_read
from lockdown.bundle.model import RequestRecord

PHP = {"ini": {}, "extensions": {}, "zend_extensions": ["Zend OPcache"],
       "internal_functions": ["mysqli_query"], "internal_classes": ["pdo", "pdostatement"]}
TREE = "/var/tmp/run/app"
MISSING = f"{TREE}/modules/legacy_poll/legacy_poll.module.php"
INCLUDE = [
    {"type": 2, "message": f"include_once({MISSING}): Failed to open stream: No such file or directory",
     "file": f"{TREE}/includes/module.inc.php", "line": 14, "function": "module_load_all", "count": 1},
    {"type": 2, "message": f"include_once(): Failed opening '{MISSING}' for inclusion (include_path='.')",
     "file": f"{TREE}/includes/module.inc.php", "line": 14, "function": "module_load_all", "count": 1},
]
REGISTRY = "SELECT name, filename FROM modules WHERE status = 1 ORDER BY weight, name"
LOG = "INSERT INTO event_log (type, message) VALUES ('php', 'Module legacy_poll is missing')"


def ev(f, what):
    return next(e.value for e in f.evidence if e.what.startswith(what))


def warned(errors=INCLUDE, on=(0, 1, 2, 3), n=4, log=False, profile=None):
    """n timed GETs of / (those in `on` raising `errors`), each reading the registry; with `log`,
    each writes a log row, and one instrumented request with `profile`."""
    reqs, stmts = [], []
    for i in range(n):
        r = request(f"r{i:06d}", "/")
        r.php_errors = [dict(e) for e in errors] if i in on else None
        reqs.append(r)
        stmts += [statement(r.id, REGISTRY, duration_us=100), statement(r.id, "SELECT 1 FROM posts LIMIT 1")]
        if log:
            stmts.append(statement(r.id, LOG, duration_us=2000))
    xhprof = {}
    if profile:
        inst = request("r000100", "/", instrumented=True)
        reqs.append(inst)
        stmts += [statement(inst.id, REGISTRY), statement(inst.id, LOG, duration_us=2000)]
        xhprof = {inst.id: profile}
    return context(reqs, stmts, xhprof=xhprof, php=PHP)


def with_tree(ctx):
    """The capture's run directory, whose app/ is the tree the paths are shown relative to."""
    ctx.manifest["run_dir"] = "/var/tmp/run"
    return ctx


def test_an_include_of_a_missing_module_on_every_request_is_one_finding_with_the_registry():
    [f] = php_warning.detect(with_tree(warned()))
    d = f.details
    assert d["file"] == "includes/module.inc.php" and d["line"] == 14 and d["function"] == "module_load_all"
    assert d["missing"] == {"file": "modules/legacy_poll/legacy_poll.module.php", "module": "legacy_poll"}
    assert d["case"] == "includes/module.inc.php:14 modules/legacy_poll/legacy_poll.module.php"
    assert len(d["messages"]) == 2 and all(TREE not in m for m in d["messages"])
    assert d["per_request"] == {"min": 2, "median": 2, "max": 2} and d["type"] == "E_WARNING"
    assert d["registry"] == {"table": "modules", "column": "filename", "statement": REGISTRY,
                             "repair": "DELETE FROM modules WHERE filename = "
                                       "'modules/legacy_poll/legacy_poll.module.php'"}
    assert f.share_pct == 0.0 and f.severity == "low" and d["log_write"] is None
    assert f.title == ("PHP E_WARNING on every request: includes/module.inc.php:14, "
                       "missing modules/legacy_poll/legacy_poll.module.php")


def test_rare_silenced_or_other_types_are_not_findings():
    assert not php_warning.detect(with_tree(warned(on=(0, 1, 2))))      # 3 of 4 < 0.8
    deprecated = [dict(INCLUDE[0], type=8192)]
    assert not php_warning.detect(with_tree(warned(errors=deprecated)))
    ctx = with_tree(warned(errors=deprecated))
    ctx.thresholds["php-warning"]["types"] = ["E_DEPRECATED"]
    assert len(php_warning.detect(ctx)) == 1


def test_a_notice_without_a_missing_file_names_its_message():
    notice = [{"type": 8, "message": 'Undefined array key "z"', "file": f"{TREE}/index.php", "line": 8,
               "function": "main()", "count": 3}]
    [f] = php_warning.detect(with_tree(warned(errors=notice)))
    assert f.details["case"] == 'index.php:8 Undefined array key "z"' and f.details["missing"] is None
    assert f.details["registry"] is None and f.details["per_request"]["median"] == 3
    assert '`Undefined array key "z"`' in f.summary


@pytest.mark.parametrize("name,logger", [("bb_log", True), ("watchdog", True), ("dblog_watchdog", True),
                                         ("Psr\\Log\\LoggerInterface::warning", True),
                                         ("Monolog\\Logger::addRecord", True), ("EventLog::write", True),
                                         ("Catalog\\Db\\Connection::run", False), ("blog_post", False),
                                         ("user_login", False), ("dialog_open", False)])
def test_loggers_by_name(name, logger):
    assert write_on_read.is_logger(name) is logger


def log_profile(logger="bb_log"):
    return {"main()": {"ct": 1, "wt": 50_000},
            "main()==>module_load_all": {"ct": 1, "wt": 9_000},
            "module_load_all==>db_fetch_all": {"ct": 1, "wt": 500},
            "db_fetch_all==>db_query": {"ct": 1, "wt": 450},
            f"module_load_all==>{logger}": {"ct": 1, "wt": 8_000},
            f"{logger}==>db_query": {"ct": 1, "wt": 7_900},
            "db_query==>mysqli_query": {"ct": 2, "wt": 8_200}}


@pytest.mark.parametrize("logger", ["bb_log", "watchdog"])
def test_a_write_sent_by_a_logger_says_so_and_the_warning_carries_its_cost(logger):
    ctx = with_tree(warned(log=True, profile=log_profile(logger)))
    [w] = write_on_read.detect(ctx)
    assert w.details["cause"] == {"kind": "log write", "function": logger}
    assert f"the logging function `{logger}` sends it" in w.summary and "batch it" not in w.summary
    [f] = php_warning.detect(ctx)
    assert f.details["log_write"] == {"fingerprint": w.details["fingerprint"], "sender": logger}
    assert f.share_pct == w.share_pct > 0 and f"logged by `{logger}`" in f.summary
    assert ev(f, "the log writes it causes") == w.share_pct


def test_a_write_not_sent_by_a_logger_keeps_the_old_advice():
    ctx = with_tree(warned(log=True, profile=log_profile("hit_counter")))
    [w] = write_on_read.detect(ctx)
    assert w.details["cause"] is None and "batch it" in w.summary
    [f] = php_warning.detect(ctx)
    assert f.details["log_write"] is None and f.share_pct == 0.0


def test_request_records_carry_php_errors_and_old_ones_read():
    base = request("r000001").to_json()
    assert RequestRecord.from_json({**base, "php_errors": INCLUDE}).php_errors == INCLUDE
    old = {k: v for k, v in base.items() if k != "php_errors"}
    assert RequestRecord.from_json(old).php_errors is None
