"""Command-line interface: parses arguments and calls the stages; nothing else lives here."""
from ..signals import starting

with starting():
    from .main import main  # noqa: F401

__all__ = ["main"]
