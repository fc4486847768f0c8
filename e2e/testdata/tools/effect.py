import json
import os
import sys
import time

args = json.load(sys.stdin)
# The effect happens first, so a caller that dies during the wait leaves it behind.
with open(os.environ["EFFECT_LOG"], "a") as f:
    f.write(json.dumps({"env": os.environ.get("SKEIN_CALL_ID", ""), "arg": args.get("idempotency_key", ""),
                        "note": args["note"]}) + "\n")
time.sleep(args.get("seconds", 0))
json.dump({"ok": True, "result": {"appended": args["note"]}}, sys.stdout)
