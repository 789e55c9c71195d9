"""`python -m longca_cli ...`: the `longca` command without its console script on PATH (the
Makefile calls it this way, so `make bench PYTHON=...` needs no activated environment)."""
from .main import run_cli

run_cli()
