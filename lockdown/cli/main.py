"""The `lockdown` click group: version, one-line errors, signals, and the orphan sweep."""
from __future__ import annotations

import contextlib
import errno
import importlib
import signal
import sys

import click

from .. import __version__
from ..errors import RUNTIME_FAILURE, USAGE_ERROR, LockdownError, PhaseFailed, RuntimeFailure, UsageError
from ..collectors.server_settings import restore_pending
from ..harness.processes import sweep_orphans
from ..signals import Terminated, exit_status, raise_terminated, starting


_FILE_SYSTEM_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
_LONGEST_TIMER_S = 1e9     # setitimer's bound is the platform's time_t: --timeout 1e20 is none


@contextlib.contextmanager
def working():
    """The part of a command that does its work (starts servers, measures, writes results),
    after its input was checked: a LockdownError raised in it is a runtime failure (exit 1),
    unless it is a `UsageError` (lockdown/errors.py)."""
    try:
        yield
    except LockdownError as e:
        if e.exit_code == USAGE_ERROR and not isinstance(e, UsageError):
            e.exit_code = RUNTIME_FAILURE
        raise


@contextlib.contextmanager
def deadline(seconds: float | None):
    """The work of a command (`working`), stopped with a RuntimeFailure (unwinding every context
    manager) when `seconds` have passed."""
    if not seconds:
        with working():
            yield
        return

    def expire(signum, frame):
        raise RuntimeFailure(f"timed out after {seconds:g} s (--timeout); everything started "
                             f"was stopped, logs are in the run directory")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, _LONGEST_TIMER_S))
    try:
        with working():
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# Each lockdown/cli/NAME.py adds the command NAME to `main` when imported. Only the command
# run is imported: all of them together took 0.3 s at every start.
COMMANDS = ("analyze", "bench", "compare", "doctor", "export", "flamegraph", "init", "profile",
            "report", "restore", "run", "serve", "targets", "validate", "verify", "writeup")
COMMANDS = tuple(sorted(COMMANDS + ("agent", "fleet")))     # the fleet's (docs/fleet.md)


def one_line(message) -> str:
    """An error's message on one line: a path or value it quotes may hold a line break (a
    directory named so, a damaged file's field)."""
    return str(message).replace("\r", "\\r").replace("\n", "\\n")


class LockdownGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx, name):
        if name in COMMANDS and name not in self.commands:
            with starting():
                importlib.import_module(f"{__package__}.{name}")
        return super().get_command(ctx, name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """As click's, but a usage error (bad option value, missing argument) is one line, as
        every other error is: click's own shows the usage, a hint and the error on four."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:    # plain `lockdown`: the help
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "lockdown"
            click.echo(f"lockdown: error: {e.format_message().rstrip('.')} (see `{where} --help`)", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, raise_terminated)
        try:
            for message in sweep_orphans() + restore_pending():
                click.echo(message, err=True)
            return super().invoke(ctx)
        except PhaseFailed as e:
            click.echo(f"lockdown: error: {one_line(e)}", err=True)
            if e.details:
                click.echo(e.details, err=True)
            ctx.exit(e.exit_code)
        except LockdownError as e:
            click.echo(f"lockdown: error: {one_line(e)}", err=True)
            ctx.exit(e.exit_code)
        except RuntimeError as e:           # pathlib's resolve() of a symlink loop, before Python 3.13
            if not str(e).startswith("Symlink loop from "):
                raise
            click.echo(f"lockdown: error: {one_line(str(e)[len('Symlink loop from '):])}: a loop of symbolic "
                       f"links; give another path", err=True)
            ctx.exit(USAGE_ERROR)
        except OSError as e:
            if e.errno in (errno.ENAMETOOLONG, errno.ELOOP):    # a path given, or one a file read names
                hint = "give a shorter path" if e.errno == errno.ENAMETOOLONG else "give another path"
                where = one_line(e.filename2 or e.filename or "a path")
                click.echo(f"lockdown: error: {where}: {e.strerror}; {hint}", err=True)
                ctx.exit(USAGE_ERROR)
            if e.errno not in _FILE_SYSTEM_ERRORS:
                raise
            # a full or read-only disk can stop any write; everything started was stopped on the way
            where = e.filename2 or e.filename
            full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            hint = "free some space and run it again" if full else "check its permissions, or choose another directory"
            what = f"cannot write {where}" if where else "a write failed"
            click.echo(f"lockdown: error: {what}: {e.strerror}; {hint}", err=True)
            # a full disk is a failure of the work; a place that cannot be written, a bad destination
            ctx.exit(RUNTIME_FAILURE if full else USAGE_ERROR)
        except KeyboardInterrupt as e:     # exit 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
            what = "terminated" if isinstance(e, Terminated) else "interrupted"
            click.echo(f"lockdown: {what}; everything started was stopped", err=True)
            ctx.exit(exit_status(e))


@click.group(cls=LockdownGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockdown")
def main():
    """lockdown: run a PHP application as production does, measure it, find what makes it slow."""



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
