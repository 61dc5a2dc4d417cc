"""Targets: what a target directory holds, where built-in ones live, and how they are prepared."""
