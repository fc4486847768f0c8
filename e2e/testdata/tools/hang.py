import json
import os
import subprocess
import sys
import time

args = json.load(sys.stdin)
child = subprocess.Popen(["sleep", "300"])
tmp = args["pidfile"] + ".tmp"
with open(tmp, "w") as f:
    f.write("%d %d\n" % (os.getpid(), child.pid))
os.rename(tmp, args["pidfile"])
time.sleep(300)
json.dump({"ok": True, "result": {"hung": True}}, sys.stdout)
