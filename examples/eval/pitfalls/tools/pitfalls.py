#!/usr/bin/env python3
"""The pitfalls suite's tools, one program: the tool name is its first argument.

Each reads one JSON object of arguments on stdin and prints {"ok": true, "result": ...} or
{"ok": false, "error": "..."}. Every quirk is what real tools do: an undocumented date format, an
ordering constraint, a unit, workspace-relative paths, an enumeration.
"""
import json
import re
import sys

NOTES = "Ship the checkout fix first, then rotate the keys and tell the support team."


def fail(msg):
    print(json.dumps({"ok": False, "error": msg}))
    return 1


def ok(result):
    print(json.dumps({"ok": True, "result": result}))
    return 0


def report_tool(a):
    d = str(a.get("date", ""))
    m = re.fullmatch(r"(\d{2})/(\d{2})/(\d{4})", d)
    if not m:
        return fail(f'date must be DD/MM/YYYY, got "{d}"')
    return ok({"report": f"R-{m.group(1)}{m.group(2)}", "period": f"{m.group(2)}/{m.group(3)}"})


def db_open(a):
    db = str(a.get("database", ""))
    if db != "sales":
        return fail(f'no database "{db}"; the databases are: sales')
    return ok({"handle": "h-sales"})


def db_query(a):
    if a.get("handle") != "h-sales":
        return fail("no open connection: call db_open first and pass its handle")
    return ok({"rows": [{"count": 42}]})


def set_thermostat(a):
    v = a.get("value")
    if not isinstance(v, int) or isinstance(v, bool):
        return fail("value must be an integer number of tenths of a degree")
    return ok({"room": a.get("room", ""), "set_to_c": v / 10})


def read_file(a):
    p = str(a.get("path", ""))
    if p.startswith("/"):
        return fail("absolute paths are not allowed; give the path relative to the workspace")
    if p != "data/notes.txt":
        return fail(f"no such file in the workspace: {p}")
    return ok({"text": NOTES, "words": len(NOTES.split())})


def create_ticket(a):
    p = str(a.get("priority", ""))
    if p not in ("P1", "P2", "P3", "P4"):
        return fail(f'priority must be one of P1, P2, P3, P4 (got "{p}")')
    return ok({"ticket": "T-17", "title": a.get("title", ""), "priority": p})


TOOLS = {f.__name__: f for f in (report_tool, db_open, db_query, set_thermostat, read_file, create_ticket)}


def main():
    try:
        args = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        return fail(f"arguments are not JSON: {e}")
    if len(sys.argv) != 2 or sys.argv[1] not in TOOLS:
        return fail(f"usage: pitfalls.py TOOL, one of {', '.join(TOOLS)}")
    return TOOLS[sys.argv[1]](args)


if __name__ == "__main__":
    sys.exit(main())
