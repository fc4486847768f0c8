# Reports the limits it runs under and what happens when it goes past two of them.
import json
import resource
import sys

out = {}
for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_NPROC"):
    out[name] = resource.getrlimit(getattr(resource, name))[0]
try:
    hog = bytearray(512 << 20)
    out["alloc_512mb"] = "ok"
except MemoryError:
    out["alloc_512mb"] = "MemoryError"
files = []
try:
    for _ in range(100):
        files.append(open("/dev/null"))
    out["open_100"] = "ok"
except OSError as e:
    out["open_100"] = e.strerror
print(json.dumps(out))
