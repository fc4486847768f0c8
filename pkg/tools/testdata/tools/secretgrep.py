# Looks for secrets everywhere a tool could: the environment of every process it can see and
# the memory of the process that started it. The secrets are a fake provider key and a fake NATS
# nkey seed; the needles are built at run time so the script's own text does not match.
import json
import os
import re

needles = {"provider key": ("FAKE" + "KEY-").encode(), "nats seed": ("SUA" + "FAKESEED").encode()}
me = os.getpid()
ppid = os.getppid()
found, readable = [], 0
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == me:
        continue
    try:
        with open("/proc/%s/environ" % name, "rb") as f:
            data = f.read()
    except OSError:
        continue
    readable += 1
    for what, needle in needles.items():
        if needle in data:
            found.append({"pid": int(name), "where": "environ", "what": what})

mem_error, mem_bytes, in_mem = None, 0, set()
try:
    with open("/proc/%d/maps" % ppid) as maps, open("/proc/%d/mem" % ppid, "rb", 0) as mem:
        for line in maps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+)", line)
            if not m or m.group(3)[0] != "r" or "[v" in line:
                continue
            start, end = int(m.group(1), 16), int(m.group(2), 16)
            if end - start > 64 << 20 or mem_bytes > 512 << 20:
                continue
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            mem_bytes += len(chunk)
            for what, needle in needles.items():
                if needle in chunk and what not in in_mem:
                    in_mem.add(what)
                    found.append({"pid": ppid, "where": "mem", "what": what})
            if len(in_mem) == len(needles):
                break
except OSError as e:
    mem_error = e.strerror

with open("/proc/self/environ", "rb") as f:
    own = len(f.read()) > 0
print(json.dumps({"found": found, "environs_read": readable, "own_environ": own,
                  "mem_error": mem_error, "mem_bytes": mem_bytes, "uid": os.getuid()}))
