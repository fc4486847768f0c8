import fcntl
import json
import os
import sys
import time

# A tool with a real side effect, made idempotent by its call id as docs/tools.md asks of such
# tools: every run appends an "attempt" line, and the effect line is appended only when no earlier
# run applied this id (checked and written under a lock). The effect happens before the wait, so a
# caller or host that dies during the wait leaves it behind, and a re-run must not repeat it.
args = json.load(sys.stdin)
call_id = os.environ.get("SKEIN_CALL_ID", "")
with open(os.environ["EFFECT_LOG"], "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    applied = any(json.loads(line).get("kind") == "effect" and json.loads(line).get("env") == call_id
                  for line in f if line.strip()) if call_id else False
    rec = {"env": call_id, "arg": args.get("idempotency_key", ""), "note": args["note"]}
    f.write(json.dumps(dict(rec, kind="attempt")) + "\n")
    if not applied:
        f.write(json.dumps(dict(rec, kind="effect")) + "\n")
    f.flush()
    fcntl.flock(f, fcntl.LOCK_UN)
time.sleep(args.get("seconds", 0))
json.dump({"ok": True, "result": {"appended": args["note"]}}, sys.stdout)
