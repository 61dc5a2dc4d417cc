"""Statement texts cannot forge slow-log entries (issue 29, point 8), on a real MariaDB.

A statement whose text holds newlines and header lines (`# Time:`, `# User@Host:`,
`# Query_time: 1980.0 ...`, `SET timestamp=1;`) -- in a string literal, a quoted identifier, a
comment, as comment lines, after a `\\r` -- is written by the server as it was sent. The log
that a real MariaDB 10.11 writes for them, with `long_query_time=0` and the capture's
`log_slow_verbosity=query_plan`, must parse (`formats.slowlog.parse`, called as
`collectors/assemble.py` calls it) as exactly the statements PHP sent, one entry each, with
the server's own durations: each no longer than PHP's own timing of the call.

The server is started by hand (mariadb-install-db, mariadbd with networking off and its socket
in the test's directory), not through the harness: what is under test is the parser, and the
harness's way of running servers changes with issue 29's point 1."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lockdown.formats import slowlog

pytestmark = pytest.mark.skipif(not (shutil.which("mariadbd") and shutil.which("mariadb-install-db")
                                     and shutil.which("php")), reason="needs mariadbd and php")

FAKE = ("\n# Time: 800101  0:00:00\n# User@Host: root[root] @ localhost []\n"
        "# Thread_id: 99  Schema: app  QC_hit: No\n"
        "# Query_time: 1980.0  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 0\n"
        "# Rows_affected: 0  Bytes_sent: 1\nSET timestamp=1;\nSELECT 1;")
BRIEF = "\n# Time: 800101 0:00:00\n# Query_time: 1980.0 Lock_time: 0 Rows_sent: 1 Rows_examined: 0\nSELECT 1;"
HEADER_COMMENTS = ("# User@Host: root[root] @ localhost []\n# Thread_id: 99  Schema: app  QC_hit: No\n"
                   "# Query_time: 1980.0  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 0\n"
                   "# Rows_affected: 0  Bytes_sent: 1")

# (how PHP sends it, text): every one accepted by the server
STATEMENTS = [
    ("query", "SELECT 'x" + BRIEF + "' AS a"),                        # the case, in a literal
    ("query", "SELECT v FROM t WHERE id = 1 /* c" + BRIEF + " */"),   # ... and in a comment
    ("query", "SELECT 'x" + FAKE + "' AS a"),
    ("query", "SELECT \"it\\\"s" + FAKE + "\" AS a, 'it''s\\'" + FAKE + "' AS b"),
    ("query", "SELECT 1 AS `a\n# Query_time: 1980.0  Lock_time: 0.0  Rows_sent: 1  Rows_examined: 0\n"
              "SET timestamp=1;\nx;`"),
    ("query", "SELECT /*!50000 '*/" + FAKE + "' AS */ c"),
    ("query", "SELECT v FROM t\n" + HEADER_COMMENTS + "\nWHERE id = 2"),            # comment lines mid-text
    ("query", "SELECT 3;\n" + HEADER_COMMENTS + "\n-- SELECT 5"),                 # a `;`, then comments
    ("query", "SELECT 6 -- trailing"),                                              # the server's `;` in a comment
    ("query", HEADER_COMMENTS + "\nSET timestamp=1"),                              # comments, then SET
    ("query", "SELECT 7 # trailing"),
    ("query", "UPDATE t -- x;\n" + HEADER_COMMENTS + "\nSET timestamp=1"),          # UPDATE t SET timestamp=1
    ("query", "# x;\n" + HEADER_COMMENTS + "\nSET timestamp=1"),
    ("query", "UPDATE t -- x;\n" + HEADER_COMMENTS + "\nSET timestamp=1;\n# c"),    # ... then a comment
    ("query", "SET timestamp=DEFAULT"),
    ("query", "SELECT 8;\r" + HEADER_COMMENTS.replace("\n", "\r") + "\rSET timestamp=1;\rSELECT 9"),
    ("query", "SELECT 'a\\\\'" + " AS b, 'c" + FAKE.replace("'", "\\'") + "' AS d"),
    ("multi", "SELECT 10; SELECT 'e" + FAKE + "' AS f; SELECT 11"),
    ("query", "SET SESSION sql_mode='NO_BACKSLASH_ESCAPES'"),
    ("query", "SELECT 'a\\' AS b, '" + FAKE.replace("'", "''") + "' AS c"),         # 'a\' is whole here
    ("query", "SET SESSION sql_mode=DEFAULT"),
    ("query", "SELECT v FROM t ORDER BY v"),                                        # a plan line
]

PHP = r"""<?php
mysqli_report(MYSQLI_REPORT_OFF);
[$socket, $file] = [$argv[1], $argv[2]];
$db = mysqli_init();
if (!$db->real_connect('localhost', 'root', '', 'app', 0, $socket)) { fwrite(STDERR, mysqli_connect_error()); exit(1); }
$out = ['thread' => $db->thread_id, 'calls' => []];
foreach (json_decode(file_get_contents($file), true) as [$how, $sql]) {
    $t = hrtime(true);
    if ($how === 'multi') {
        $ok = $db->multi_query($sql);
        do { if ($r = $db->store_result()) { $r->free(); } } while ($db->more_results() && $db->next_result());
    } else {
        $ok = $db->query($sql);
        if ($ok instanceof mysqli_result) { $ok->free(); }
    }
    $out['calls'][] = [$sql, intdiv(hrtime(true) - $t, 1000), $ok !== false ? '' : $db->error];
}
echo json_encode($out);
"""


def _mariadb(sock: Path) -> list[str]:
    return ["mariadb", "--no-defaults", "-uroot", f"--socket={sock}", "--batch"]


@pytest.fixture
def server(tmp_path):
    data, tmp, sock = tmp_path / "data", tmp_path / "tmp", tmp_path / "s.sock"
    tmp.mkdir()
    # networking off, the socket in the test's own directory: as root, root is the OS's root
    # only (unix_socket); as another account, root without a password, which only that
    # account can reach
    root = os.geteuid() == 0
    user = ["--user=root"] if root else []
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--skip-test-db",
                    f"--auth-root-authentication-method={'socket' if root else 'normal'}", f"--tmpdir={tmp}",
                    *user],
                   check=True, capture_output=True, timeout=300)
    proc = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}",
                             "--skip-networking", f"--tmpdir={tmp}", f"--pid-file={tmp_path}/pid",
                             f"--log-error={tmp_path}/err", "--innodb-log-file-size=16M", *user],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if subprocess.run(_mariadb(sock) + ["-e", "SELECT 1"], capture_output=True).returncode == 0:
                break
            if proc.poll() is not None:
                pytest.fail("mariadbd exited: " + (tmp_path / "err").read_text()[-2000:])
            time.sleep(0.1)
        else:
            pytest.fail("mariadbd did not start")
        yield sock
    finally:
        proc.terminate()
        proc.wait(timeout=120)


def test_statement_text_holding_header_lines_is_one_statement_with_its_own_numbers(server, tmp_path):
    sock = server
    log = tmp_path / "slow.log"
    admin = subprocess.run(_mariadb(sock), text=True, capture_output=True, input=(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v TEXT, `timestamp` INT);"
        "INSERT INTO app.t VALUES (1, 'a', 0), (2, 'b', 0);"
        "SET GLOBAL log_slow_verbosity = 'query_plan'; SET GLOBAL long_query_time = 0;"
        f"SET GLOBAL slow_query_log_file = '{log}'; SET GLOBAL slow_query_log = ON;"))
    assert admin.returncode == 0, admin.stderr
    sent = tmp_path / "statements.json"
    sent.write_text(json.dumps(STATEMENTS))
    script = tmp_path / "send.php"
    script.write_text(PHP)
    php = subprocess.run(["php", "-d", "display_errors=stderr", str(script), str(sock), str(sent)],
                         capture_output=True, text=True, timeout=120)
    assert php.returncode == 0, php.stderr
    got = json.loads(php.stdout)
    assert [err for _, _, err in got["calls"]] == [""] * len(STATEMENTS)    # every one ran
    subprocess.run(_mariadb(sock) + ["-e", "SET GLOBAL slow_query_log = OFF"], check=True)

    # read as collectors/assemble.py reads it
    with open(log, errors="replace") as f:
        entries = list(slowlog.parse(f, str(log), plans=True))
    mine = [e for e in entries if e.thread_id == got["thread"]]
    # what the server ran: each text as sent, the multi-statement as its three statements
    expected = []
    for how, sql in STATEMENTS:
        expected += ([part.strip() for part in sql.split("; ")] if how == "multi" else [sql])
    assert [e.sql for e in mine] == expected
    # the server's own durations: none invented, none longer than PHP's timing of its call
    client = {sql: us for sql, us, _ in got["calls"]}
    for e in mine:
        assert e.query_time_us < 1_000_000, e
        if e.sql in client:
            assert e.query_time_us <= client[e.sql] + 1_000, (e.sql, e.query_time_us, client[e.sql])
    # the log holds PHP's statements only (turning it on and off is not logged): nothing else
    # was read out of their texts, no thread 99
    assert mine == entries
    assert [e.plan for e in mine if e.sql == "SELECT v FROM t ORDER BY v"] == [["full_scan", "filesort"]]
    # the file really holds the hostile lines at the start of a line, and \r inside a line
    raw = log.read_bytes()
    assert b"\n# Query_time: 1980.0" in raw and b"\rSET timestamp=1;\r" in raw
