"""`python -m lockdown` is the `lockdown` command."""
from lockdown.cli import main

main(prog_name="lockdown")
