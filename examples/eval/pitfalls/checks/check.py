#!/usr/bin/env python3
"""The pitfalls suite's checking tool: does the answer name the report the task asked for?

skein eval runs it with the task's check.args plus {"answer", "session"} on stdin; it answers
{"ok": true, "result": {"pass": bool, "reason": "..."}}.
"""
import json
import sys


def main():
    a = json.load(sys.stdin)
    want, answer = str(a.get("expect", "")), str(a.get("answer", ""))
    if want and want in answer:
        print(json.dumps({"ok": True, "result": {"pass": True}}))
    else:
        print(json.dumps({"ok": True, "result": {"pass": False, "reason": f"the answer does not give report {want}"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
