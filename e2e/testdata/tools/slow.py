import json
import sys
import time

args = json.load(sys.stdin)
time.sleep(args["seconds"])
json.dump({"ok": True, "result": {"slept": args["seconds"]}}, sys.stdout)
