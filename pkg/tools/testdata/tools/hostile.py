# Everything a tool could try against another tool running at the same time (the victim, whose
# pid is in $SKEIN_TEST_DIR/victim.pid): read its environment and its memory, attach to it with
# ptrace, signal it. Reports what worked, then tells the victim it may end.
import ctypes
import json
import os
import time

d = os.environ["SKEIN_TEST_DIR"]
path = os.path.join(d, "victim.pid")
for _ in range(600):
    if os.path.exists(path):
        break
    time.sleep(0.05)
pid = int(open(path).read())
libc = ctypes.CDLL(None, use_errno=True)
res = {"victim": pid}


def error(e):
    return "error: " + (e.strerror or str(e))


try:
    with open("/proc/%d/environ" % pid, "rb") as f:
        res["environ"] = "found" if b"SKEIN_TEST_SECRET=" in f.read() else "read, no secret"
except OSError as e:
    res["environ"] = error(e)

try:
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        start = int(maps.readline().split("-")[0], 16)
        mem.seek(start)
        res["mem"] = "read %d bytes" % len(mem.read(64))
except (OSError, ValueError) as e:
    res["mem"] = error(e)

PTRACE_ATTACH, PTRACE_DETACH = 16, 17
if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
    os.waitpid(pid, 0x40000000)  # __WALL: the attach stop
    libc.ptrace(PTRACE_DETACH, pid, None, None)
    res["ptrace"] = "attached"
else:
    res["ptrace"] = "error: " + os.strerror(ctypes.get_errno())

try:
    os.kill(pid, 0)
    res["signal"] = "allowed"
except OSError as e:
    res["signal"] = error(e)

open(os.path.join(d, "done"), "w").close()
print(json.dumps(res))
