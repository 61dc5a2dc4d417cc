"""Signals held back while lockdown does something that must not be cut in half.

Ctrl-C (SIGINT), SIGTERM, SIGHUP and --timeout's SIGALRM raise in the main thread wherever it
is, and unwind through the context managers (cli/main.py). Some steps must not be cut in the
middle: stopping what was started (a signal while php-fpm was being stopped left MariaDB
running after lockdown had said everything was stopped, and its record behind), starting a
child until it is recorded (a signal between fork and the record left a child that nothing
would stop), restoring a server's settings, and importing the CLI (a Ctrl-C there printed
a traceback). `held()` keeps those signals until the block ends, then delivers the first one
as if it had just arrived. Every step run under it is bounded (a stop waits at most its grace
period, then kills).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so every `finally` and context manager runs;
    lockdown then exits as a shell reports that signal's death, 128 + its number (143 for
    SIGTERM, 129 for SIGHUP), as Ctrl-C exits 130."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum, frame):
    """The handler of SIGTERM and SIGHUP (cli/main.py)."""
    raise Terminated(signum)


def exit_status(interrupt: BaseException) -> int:
    """The exit status after `interrupt` unwound everything: 128 + the signal's number."""
    return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def held():
    """Hold SIGINT, SIGTERM, SIGHUP and SIGALRM for the block; deliver the first one caught
    when it ends (the handler that was in place raises, the default action kills). Nested
    blocks pass what they caught to the outer one. Outside the main thread, where Python
    runs no signal handler, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum, frame):
        caught.append(signum)

    previous = {}
    try:
        for sig in HELD:
            previous[sig] = signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:          # None: set outside Python; leave it to the default
                signal.signal(sig, handler)
            else:
                signal.signal(sig, signal.SIG_DFL)
        if caught:
            _deliver(caught[0], previous.get(caught[0]))


def _deliver(signum: int, handler) -> None:
    if callable(handler):
        handler(signum, None)
    elif handler in (signal.SIG_DFL, None):
        os.kill(os.getpid(), signum)


@contextlib.contextmanager
def starting():
    """Importing the CLI or a command's module, before anything is started: a signal waits
    for the import to finish (a Ctrl-C inside a dataclass's creation was a RuntimeError), and
    then is one line and exit 130 (143 for SIGTERM) instead of a traceback."""
    try:
        with held():
            yield
    except KeyboardInterrupt as e:
        import sys
        what = "terminated" if isinstance(e, Terminated) else "interrupted"
        sys.stderr.write(f"lockdown: {what} while starting; nothing was started\n")
        raise SystemExit(exit_status(e))
