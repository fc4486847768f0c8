#!/usr/bin/env python3
"""Test-only tools for the executor's tests; the mode is the first argument.

rendezvous  {dir, me, await: [file...]}  create <dir>/<me>.started, wait until every file in
            await exists in dir, create <dir>/<me>.done; answer what dir held on arrival.
            Two calls that await each other can only both finish if they run at once.
sleep       {seconds}  sleep, then answer.
fail        {}  exit non-zero with a JSON error and a stderr line.
big         {rows}  answer {"service", "rows": [...]} with that many log rows (~130 bytes each).
"""
import json
import os
import sys
import time


def rendezvous(args):
    d, me = args["dir"], args["me"]
    seen = sorted(f for f in os.listdir(d) if not f.startswith(me + "."))
    open(os.path.join(d, me + ".started"), "w").close()
    deadline = time.time() + float(args.get("timeout_s", 15))
    for f in args.get("await", []):
        while not os.path.exists(os.path.join(d, f)):
            if time.time() > deadline:
                print(json.dumps({"ok": False, "error": f"{me}: gave up waiting for {f}"}))
                return 1
            time.sleep(0.02)
    open(os.path.join(d, me + ".done"), "w").close()
    print(json.dumps({"me": me, "seen_on_arrival": seen}))
    return 0


def main():
    mode = sys.argv[1]
    args = json.load(sys.stdin)
    if mode == "rendezvous":
        return rendezvous(args)
    if mode == "sleep":
        time.sleep(float(args["seconds"]))
        print(json.dumps({"slept_s": args["seconds"]}))
        return 0
    if mode == "big":
        rows = [{"seq": i, "ts": "2026-11-20T%02d:%02d:%02dZ" % (i // 3600 % 24, i // 60 % 60, i % 60),
                 "level": "warn" if i % 97 == 0 else "info", "service": "billing",
                 "msg": "request handled in %d ms for invoice INV-%06d" % (i * 7 % 900, i)} for i in range(args["rows"])]
        print(json.dumps({"service": "billing", "rows": rows}))
        return 0
    if mode == "fail":
        print("disk quota exceeded while writing the report", file=sys.stderr)
        print(json.dumps({"ok": False, "error": "could not write the report"}))
        return 3
    print(json.dumps({"ok": False, "error": f"unknown mode {mode}"}))
    return 2


if __name__ == "__main__":
    sys.exit(main())
