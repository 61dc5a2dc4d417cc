"""lockdown: run a PHP application as production does, measure it, and find what makes it slow."""

__version__ = "0.1.0"
