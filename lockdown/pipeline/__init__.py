"""The stages in sequence, callable from Python: `run` (bench, profile, analyze, detect, probe,
propose, write) with typed options and a progress callback. The CLI parses arguments, calls a
pipeline and prints its result."""
