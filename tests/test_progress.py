"""Long phases show where they are on a terminal, print plain lines elsewhere, and are silent
with --json: a real `lockdown bench` / `lockdown profile` on `hello`, stderr on a pseudo-terminal."""
import json
import os
import pty
import re
import subprocess

from conftest import REPO, lockdown_argv

SHORT = ("--runs", "2", "--duration", "2", "--warmup-duration", "1", "--warmup-requests", "5")


def run_with_terminal_stderr(argv, env, timeout=300):
    """Run argv with stdout on a pipe and stderr on a pseudo-terminal: (rc, stdout, terminal)."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=sub, text=True,
                            env={**env, "TERM": "xterm", "COLUMNS": "120"}, cwd=REPO)
    os.close(sub)
    screen = bytearray()
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:          # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    out = proc.stdout.read()
    rc = proc.wait(timeout=timeout)
    os.close(main)
    return rc, out, screen.decode(errors="replace")


def test_bench_shows_live_progress_on_a_terminal(env):
    rc, out, screen = run_with_terminal_stderr(lockdown_argv("bench", "hello", *SHORT), env)
    assert rc == 0, out + screen
    # the status line is redrawn in place (carriage return + erase line) ...
    frames = [f for f in screen.split("\r\x1b[K") if f]
    runs = [f for f in frames if "measured run 2/2" in f]
    assert runs and any(re.search(r"\[#+\.*\] \d/2 s", f) for f in runs), frames[-20:]
    assert any("warmup at concurrency" in f for f in frames)
    assert any(re.search(r"warmup, one at a time \[[#.]+\] \d/5", f) for f in frames)
    # ... with the command's elapsed time, and erased at the end: nothing left on the line
    assert all(f.startswith("bench hello 0:") for f in frames if "[" in f)
    assert screen.endswith("\r\x1b[K")
    # the log lines and the table still go to stdout, free of terminal controls
    assert "[measure] run 2/2" in out and "req/s" in out and "\x1b" not in out


def test_plain_output_when_not_on_a_terminal(lockdown):
    r = lockdown("bench", "hello", *SHORT)
    assert r.returncode == 0, r.stderr
    assert "[warmup-concurrent]" in r.stdout and "[measure] run 1/2" in r.stdout
    assert "\x1b" not in r.stdout + r.stderr and "\r" not in r.stdout + r.stderr


def test_json_alone_prints_only_the_document(lockdown, env, tmp_path):
    # on a terminal too: --json means no progress at all
    rc, out, screen = run_with_terminal_stderr(lockdown_argv("bench", "hello", *SHORT, "--json"), env)
    assert rc == 0, out + screen
    data = json.loads(out)
    assert len(data["runs"]) == 2 and data["summary"]["rps_mean"] > 0
    assert screen == ""

    p = lockdown("profile", "hello", "-o", tmp_path / "b-json",
                 "--requests", "12", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["manifest"]["requests"]["logged"] == 12
    assert json.loads(open(os.path.join(doc["bundle"], "manifest.json")).read()) == doc["manifest"]
    assert p.stderr == ""


def test_json_file_keeps_the_terminal_output(lockdown, tmp_path):
    """`--json FILE` writes the document and leaves the command's output as it is without it
    (profile and run print their own summaries): the file's name is the last line."""
    doc = tmp_path / "profile.json"
    p = lockdown("profile", "hello", "-o", tmp_path / "b", "--requests", "12", "--json", doc)
    assert p.returncode == 0, p.stderr
    assert json.loads(doc.read_text())["manifest"]["requests"]["logged"] == 12
    assert "[capture] " in p.stdout and "bundle written to" in p.stdout
    assert p.stdout.rstrip().endswith(f"JSON written to {doc}")
    doc = tmp_path / "run.json"
    r = lockdown("run", "hello", "-o", tmp_path / "run", "--no-bench", "--requests", "12", "--json", doc)
    assert r.returncode == 0, r.stderr
    assert json.loads(doc.read_text())["directory"] == str(tmp_path / "run")
    assert "== report" in r.stdout and "report: " in r.stdout
    assert r.stdout.rstrip().endswith(f"JSON written to {doc}")


def test_json_destination_is_checked_before_any_work(lockdown, tmp_path):
    r = lockdown("bench", "hello", *SHORT, "--json", tmp_path / "missing" / "out.json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "does not exist" in r.stderr
