#!/usr/bin/env bash
# The wheels in dist/ (make wheels) install into a fresh venv the way the README says, and
# `longca list-kernels --format json` lists the installed plugins with their full reasons, and
# `longca new-plugin` works from the wheel.
set -euo pipefail
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q torch==2.13.0   # the CPU build from local disk, first (see GUIDE)
"$venv/bin/python" -m pip install -q --find-links dist longca-cli longca-plugin-vsa longca-plugin-sdpa longca-plugin-fa2
# every layer distribution came from dist/ (longca-cli pulls all but flashplan, which fa2 pulls)
"$venv/bin/python" -c 'from importlib.metadata import version
for d in ("longca-core", "longca-flashplan", "longca-cp", "longca-runner", "longca-testing", "longca-sim", "longca-cli"):
    version(d)
print("wheels: every layer distribution installed")'
cd "$(mktemp -d)"   # not the checkout: only what the wheels installed
"$venv/bin/longca" --version
"$venv/bin/longca" list-kernels --format json | "$venv/bin/python" -c '
import json, sys
rows = {r["name"]: r for r in json.load(sys.stdin)}
assert {"vsa", "sdpa", "reference"} <= set(rows), sorted(rows)
vsa = rows["vsa"]
assert vsa["needs"] == "cuda sm90+" and "sm90" in vsa["reason"] and "README" not in vsa["reason"], vsa
print("wheels: vsa listed; needs", vsa["needs"] + "; reason:", vsa["reason"])
'
"$venv/bin/longca" new-plugin demo >/dev/null   # the template ships in the longca-cli wheel
test -f longca-plugin-demo/longca_plugin_demo/kernel.py && echo "wheels: new-plugin made longca-plugin-demo"
