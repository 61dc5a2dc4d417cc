"""Pages of a fixture app and the ground truth it sends with each (the `X-<Name>-Truth` header
catalog, bulletin, ledger, notes and glossary answer with): each page fetched once by a hook
of `lockdown bench` after a short warmup, so the pages come from the stack lockdown serves.
Shared by the fixture apps' tests."""
from __future__ import annotations

import json
import sys

from conftest import lockdown_runner

# run by the bench's --exec-after-warmup hook: argv = output file, {name: path}, header name
FETCH = """\
import json, os, sys, urllib.error, urllib.request
pages, header = json.loads(sys.argv[2]), sys.argv[3]
out = {}
for name, path in pages.items():
    try:
        with urllib.request.urlopen(os.environ["LOCKDOWN_BASE_URL"] + path) as r:
            status, headers, body = r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        status, headers, body = e.code, e.headers, e.read().decode()
    out[name] = {"status": status, "header": headers.get(header), "body": body}
open(sys.argv[1], "w").write(json.dumps(out))
"""


def fetch_pages(home, tmp, targets, pages: dict, header: str) -> dict:
    """{target: {page: {status, header, body}}}: `pages` ({name: path}) of each target."""
    (tmp / "fetch.py").write_text(FETCH)
    run = lockdown_runner(home, 600)
    out = {}
    for target in targets:
        dest = tmp / f"{target}.json"
        hook = f"{sys.executable} {tmp / 'fetch.py'} {dest} '{json.dumps(pages)}' {header}"
        # the hook is the point, not the run; 3 s: on a loaded CI host a minicms page took over
        # the 1 s run, which then had no response and failed
        r = run("bench", target, "--runs", "1", "--duration", "3", "--warmup-duration", "0",
                "--warmup-requests", "3", "--exec-after-warmup", hook)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        out[target] = json.loads(dest.read_text())
    return out


def truths(pages_by_target: dict, names) -> dict:
    """{target: {page: the header's JSON}}."""
    return {target: {name: json.loads(p[name]["header"]) for name in names} for target, p in pages_by_target.items()}
