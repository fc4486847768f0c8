#!/usr/bin/env python3
"""skein example tool: echo.

Reads one JSON object of arguments on stdin and prints one JSON object on stdout:
{"ok": true, "result": {...}} on success, {"ok": false, "error": "..."} on failure.
"""
import json
import sys


def main() -> int:
    try:
        args = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        print(json.dumps({"ok": False, "error": f"arguments are not JSON: {e}"}))
        return 2
    text = args["text"]
    if args.get("upper"):
        text = text.upper()
    print(json.dumps({"ok": True, "result": {"text": text, "length": len(text)}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
