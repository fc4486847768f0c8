#!/usr/bin/env python3
"""Shared program of the tool-catalogue benchmark: every tool answers that it did the job, with
its own name and the arguments it got, so a scripted session can run any of them."""
import json
import sys

args = json.load(sys.stdin)
print(json.dumps({"ok": True, "result": {"tool": sys.argv[1], "status": "done", "args": args}}))
