"""Command-line interface: parses arguments and calls the stages; nothing else lives here."""
from .main import main  # noqa: F401
