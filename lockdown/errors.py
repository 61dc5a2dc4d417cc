"""The exception types the CLI turns into a single clear line, and the exit statuses.

Every command exits with one of (docs/commands.md, "Exit status"):

- 0 `SUCCESS`: done (verify: the fix is confirmed);
- 1 `RUNTIME_FAILURE`: the command line was right, but something failed while the command did
  its work: a server or the target did not start or serve, a run failed, the disk filled up,
  `--timeout` passed (and Python's own 1 for a bug's traceback);
- 2 `USAGE_ERROR`: what was given is wrong: an option, an argument, a file or directory it
  names (missing, damaged, not the kind the command reads, an output that would overwrite
  something), found before anything starts;
- 3 `NOT_CONFIRMED`: the command worked and its check says no: `verify`'s fix not confirmed,
  `validate`'s coverage check failed, a required `doctor` check failed.

A `LockdownError` is a usage error, unless it is raised while a command does its work (inside
`lockdown.cli.main.working`), where it is a runtime failure; `UsageError` stays a usage error
there too (a setting php-fpm rejects as it starts), and `RuntimeFailure` is one everywhere.
"""
import errno
import os

SUCCESS, RUNTIME_FAILURE, USAGE_ERROR, NOT_CONFIRMED = 0, 1, 2, 3


class LockdownError(Exception):
    """A problem the user can act on: the message says what is wrong and what to do."""

    exit_code = USAGE_ERROR


class UsageError(LockdownError):
    """Bad input, even when it shows only once the work has started."""


class RuntimeFailure(LockdownError):
    """Something failed while the command did its work; the command line was right."""

    exit_code = RUNTIME_FAILURE


class PhaseFailed(RuntimeFailure):
    """A harness phase failed; `details` holds the evidence printed under the one-line message."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


def write_failed(path: str | os.PathLike, e: OSError, option: str = "-o") -> LockdownError:
    """The error for a write to `path` that failed with `e`: a full disk is a runtime failure
    (exit 1), any other cause (a read-only or forbidden place) a destination to change (exit 2)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return RuntimeFailure(f"cannot write {path}: {e.strerror or e}; free some space and run it again")
    return UsageError(f"cannot write {path}: {e.strerror or e}; choose another {option}")
