"""The stages in sequence, callable from Python, each with typed options and a progress
callback: `run` (bench, profile, analyze, detect, probe, propose, write; run.py), `verify`
(a finding's fix measured and re-captured; verify.py), `compare` (two configurations in
interleaved A/B pairs; compare.py). The CLI parses arguments, calls a
pipeline and prints its result."""
