"""The generic fix for a confirmed repeated-call finding that no recipe knows: a per-request
memo on the function the argument probe found repeating (php/memoize.php writes it with PHP's
tokenizer), one per object for a method, since the probe counts (object, arguments) pairs. It
is right only when the result depends on the arguments alone for the rest of the request,
which no static check can prove: the diff is a proposal for `lockdown verify`, which measures
it and compares every page before and after."""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from ..analyzers.findings import Finding, Remediation
from ..targets.config import is_patchable
from ..harness.toolchain import tool
from .recipes import PREPARED_TREE, check_applies, unified_diff

SCRIPT = Path(__file__).with_name("php") / "memoize.php"
DESCRIPTION = ("generic per-request memo of {function}, keyed on its arguments: right only if its "
               "result depends on them alone for the rest of the request; `lockdown verify` "
               "measures it and compares every page")


def memo_site(finding: Finding) -> tuple[str, str, int] | None:
    """(function, file, line) the probe confirmed for this finding, or None when it was not
    probed, or located in more than one place."""
    probe = finding.details.get("probe") or {}
    where, located = probe.get("function"), probe.get("located")
    if finding.id != "repeated-call" or not probe.get("calls") or not where or not located or "," in located:
        return None
    rel, _, line = located.rpartition(":")
    return (where, rel, int(line)) if rel and line.isdigit() else None


def memoized(path: Path, function: str, line: int, scope: str = "request", cache: dict | None = None,
             script: Path = SCRIPT) -> tuple[str | None, str]:
    """(the file's text with `function` memoized, "") or (None, why it cannot be). `scope`:
    request, object (an instance method, one memo per object) or persistent (a generated PHP
    array file; `cache` gives its name, TTL and version expression); php/memoize.php says each.
    `script` may name another writer with the same protocol (php/defer.php)."""
    text, answer = rewritten(path, function, line, script, {"scope": scope, "cache": cache or {}})
    return (text, "") if text is not None else (None, answer)


class Refusal(str):
    """A writer's reason for writing nothing, with the rest of its answer (`answer`): what it
    found that the caller may act on (setup_once.php's `fed_by_arguments`)."""
    answer: dict

    def __new__(cls, why: str, answer: dict | None = None):
        made = super().__new__(cls, why)
        made.answer = answer or {}
        return made


def rewritten(path: Path, function: str, line: int, script: Path, extra: dict) -> tuple[str | None, dict | str]:
    """(the file's new text, the writer's answer) or (None, why not): one run of a writer
    (php/*.php) on `function`, defined at `line` of `path`, with `extra` in its request."""
    name = function.rpartition("::")[2].rpartition("\\")[2]
    with tempfile.TemporaryDirectory(prefix="lockdown-memo-") as tmp:
        out = Path(tmp) / path.name
        request = {"file": str(path), "line": line, "name": name, "method": "::" in function, "out": str(out),
                   **extra}
        try:
            run = subprocess.run([tool("php"), "-n", "-d", "extension=tokenizer", "-d", "memory_limit=512M",
                                  str(script)], input=json.dumps(request), capture_output=True, text=True,
                                 timeout=60)
        except subprocess.TimeoutExpired:
            return None, f"the writer ({script.name}) took over 60 s"
        try:
            answer = json.loads(run.stdout)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            first = next((ln.strip() for ln in (run.stderr + run.stdout).splitlines() if ln.strip()), "no output")
            return None, f"the writer ({script.name}) failed (php exit {run.returncode}): {first[:200]}"
        if answer.get("written"):
            return out.read_bytes().decode("utf-8", "replace"), answer
        return None, Refusal(str(answer.get("refused")), answer)


def propose(finding: Finding, patchable: list[str], app_dir: Path, tree: str = PREPARED_TREE) -> list[Remediation]:
    """The memo diff for a probed repeated-call finding in a patchable file. When none can be
    made, `details.no_patch` says why, so the reader is not left wondering."""
    site = memo_site(finding)
    if site is None:
        not_probed = (finding.details.get("probe") or {}).get("not_probed")
        if finding.id == "repeated-call" and not_probed:
            finding.details["no_patch"] = (f"no memo proposed: the argument probe did not check it ({not_probed}), "
                                           f"and a memo is proposed only for repeats the probe confirmed")
        return []
    function, rel, line = site
    if not is_patchable(rel, patchable):
        finding.details["no_patch"] = (f"{rel} is not one of the target's patchable files; declare it "
                                       f"in target.toml to get a per-request memo of {function} to verify")
        return []
    # the probe counted repeats of (object, arguments) pairs: for a method, one memo per object
    text, why = memoized(app_dir / rel, function, line, scope="object" if "::" in function else "request")
    if text is None:
        finding.details["no_patch"] = f"no per-request memo of {function}: {why}"
        return []
    diff = unified_diff(rel, (app_dir / rel).read_text(errors="replace"), text)
    return [Remediation(kind="diff", content=diff, checked=check_applies(app_dir, rel, diff, tree), file=rel,
                        description=DESCRIPTION.format(function=function), origin="generated")]
