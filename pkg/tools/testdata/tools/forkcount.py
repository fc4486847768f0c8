# Tries to start 400 child processes and reports how many it could start and their pids.
import json
import os
import time

pids, error = [], None
for _ in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.strerror
        break
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    pids.append(pid)
print(json.dumps({"started": len(pids), "pids": pids, "error": error}))
