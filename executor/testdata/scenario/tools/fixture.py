#!/usr/bin/env python3
"""Scenario tools for the executor's cost benchmark: each answers a recorded result from
results/<name>.json (the first argument), whatever its arguments, so every run sends the model
the same realistic JSON."""
import json
import os
import sys

json.load(sys.stdin)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", sys.argv[1] + ".json")
try:
    with open(path) as f:
        sys.stdout.write(f.read())
except FileNotFoundError:
    print(json.dumps({"ok": False, "error": "nothing recorded for " + sys.argv[1]}))
    sys.exit(1)
