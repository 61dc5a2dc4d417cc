"""Parsers for the text formats of the tools lockdown drives (perf script, MariaDB's slow log)."""
