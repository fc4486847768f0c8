import json
import os
import sys

print(json.dumps({"ok": True, "result": {"args": json.load(sys.stdin), "cwd": os.getcwd(), "home": os.environ.get("HOME"), "tmpdir": os.environ.get("TMPDIR")}}))
