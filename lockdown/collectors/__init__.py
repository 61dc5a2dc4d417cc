"""Collectors: what each request did, captured while the harness drives the target.

`settings` holds what to collect; `request_log` installs the PHP prepend that logs requests and
takes Excimer and xhprof profiles; `perf` samples the workers natively; `statements` captures
SQL through MariaDB's slow log (`server_settings` restores what it changed); `attribution`
ties samples and statements to requests.
"""
