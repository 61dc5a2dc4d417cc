"""Command-line interface: parses arguments and calls the stages; nothing else lives here."""
from ..signals import held

# Importing every command takes most of a second: a Ctrl-C then printed a traceback (or,
# inside a dataclass's creation, a RuntimeError). Nothing has started yet: one line, exit 130.
try:
    with held():
        from .main import main  # noqa: F401
except KeyboardInterrupt:
    import sys
    sys.stderr.write("lockdown: interrupted while starting; nothing was started\n")
    raise SystemExit(130)

__all__ = ["main"]
