"""Remediations: turn findings into concrete, checked changes -- unified diffs against files the
target declares patchable, SQL derived from what the capture saw, php.ini lines -- and apply
them to copies (never the originals) for `lockdown verify`."""
