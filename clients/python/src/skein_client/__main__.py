"""python -m skein_client: the client's operations from a shell, printing JSON like skein --json."""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import sys
from typing import Any, Dict, List, Optional

from .client import Client, Rejected, SkeinError, Unavailable, Unreachable
from .creds import CredentialsError
from .wire import go_json

# Exit statuses, as pkg/protocol's table gives them to the skein CLI.
EXIT_UNAVAILABLE = 69  # no mesh, or no service the command needs, answers
EXIT_TRANSIENT = 75  # the mesh could not take it now: try again

BUDGET_INTS = ("max_input_tokens", "max_output_tokens", "max_turns", "max_tool_calls", "max_depth", "max_fanout")
BUDGET_FLOATS = ("max_usd", "deadline_s")


def parse_budget(kvs: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for kv in kvs:
        k, sep, v = kv.partition("=")
        if not sep:
            raise ValueError("--budget %r: want KEY=VALUE" % kv)
        try:
            if k in BUDGET_INTS:
                out[k] = int(v)
            elif k in BUDGET_FLOATS:
                out[k] = float(v)
            else:
                raise ValueError("--budget: unknown key %r; keys: %s" % (k, ", ".join(BUDGET_INTS + BUDGET_FLOATS)))
        except ValueError as e:
            if "unknown key" in str(e):
                raise
            raise ValueError("--budget %s: %r is not a number" % (k, v)) from e
    return out


def _print(v: Any) -> None:
    print(json.dumps(v, ensure_ascii=False))


def _parse_since(s: Optional[str]) -> Optional[_dt.timedelta]:
    if not s:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if s[-1] not in units:
        raise ValueError("--since %r: want a number and s, m, h or d (e.g. 24h)" % s)
    return _dt.timedelta(seconds=float(s[:-1]) * units[s[-1]])


async def _main(a: argparse.Namespace) -> int:
    c = await Client.connect(a.nats, creds=a.creds, namespace=a.namespace, connect_timeout=a.connect_timeout)
    try:
        if a.cmd in ("submit", "run"):
            budget = parse_budget(a.budget)
            rep = await c.submit(a.task, agent=a.agent, session_id=a.session_id, budget=budget or None)
            if a.no_wait:
                print(go_json(rep))
                return 0
            res = await c.wait(rep["session_id"], timeout=a.timeout)
            print(res.to_json())
            return 0 if res.succeeded else 1
        if a.cmd == "cancel":
            _print(await c.cancel(a.session_id, reason=a.reason))
            return 0
        if a.cmd == "session":
            _print(await c.session(a.session_id))
            return 0
        if a.cmd == "events":
            events = c.events(a.session_id, follow=a.follow)
            try:
                async for ev in events:
                    _print(ev)
                    if a.follow and ev.get("type") == "usage" and ev.get("role") != "miner" and not a.keep:
                        break
            finally:
                await events.aclose()
            return 0
        if a.cmd == "trace":
            _print(await c.trace(a.session_id))
            return 0
        if a.cmd == "usage":
            _print(await c.usage(by=a.by, since=_parse_since(a.since)))
            return 0
        if a.cmd == "memory":
            if a.memcmd == "list":
                _print(await c.memory_list(agent=a.agent, tier=a.tier, status=a.status, limit=a.limit))
            elif a.memcmd == "show":
                _print(await c.memory_get(a.id))
            else:
                _print(await c.memory_inspect(agent=a.agent, query=a.query, top_k=a.top_k, tier=a.tier))
            return 0
        raise AssertionError(a.cmd)
    finally:
        await c.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skein_client", description="Talk to a skein mesh over NATS.")
    p.add_argument("--nats", help="NATS URL (default $SKEIN_NATS_URL)")
    p.add_argument("--creds", help="credentials file (default $SKEIN_CREDS, then $SKEIN_HOME/creds/client.nk)")
    p.add_argument("--namespace", help="mesh namespace (default skein)")
    p.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                   help="give up connecting after this long (default $SKEIN_CONNECT_TIMEOUT, else 5)")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("submit", "run"):
        s = sub.add_parser(name, help="submit a task, wait for it and print the result as `skein run --json` does")
        s.add_argument("task")
        s.add_argument("--agent", help="agent to run the task (default: the gateway's)")
        s.add_argument("--session-id", help="use this session id (resubmitting it does not run the task twice)")
        s.add_argument("--budget", action="append", default=[], metavar="KEY=VALUE", help="limit this task (repeatable)")
        s.add_argument("--timeout", type=float, default=1800.0, help="give up waiting after this many seconds")
        s.add_argument("--no-wait", action="store_true", help="print the submit reply and leave")
    s = sub.add_parser("cancel", help="cancel a session and its children")
    s.add_argument("session_id")
    s.add_argument("--reason", default="")
    s = sub.add_parser("session", help="print a session's record")
    s.add_argument("session_id")
    s = sub.add_parser("events", help="print a session's events, one JSON object a line")
    s.add_argument("session_id")
    s.add_argument("--follow", action="store_true", help="wait for new events until the session's usage event")
    s.add_argument("--keep", action="store_true", help="with --follow, keep following after the usage event")
    s = sub.add_parser("trace", help="print every event of a session so far as one JSON array")
    s.add_argument("session_id")
    s = sub.add_parser("usage", help="tokens and cost by agent or day, as `skein usage --json`")
    s.add_argument("--by", choices=("agent", "day"), default="agent")
    s.add_argument("--since", help="only sessions that ended within this long, e.g. 24h")
    s = sub.add_parser("memory", help="read memory")
    ms = s.add_subparsers(dest="memcmd", required=True)
    m = ms.add_parser("list")
    m.add_argument("--agent", default="")
    m.add_argument("--tier", default="")
    m.add_argument("--status", default="")
    m.add_argument("--limit", type=int, default=0)
    m = ms.add_parser("show")
    m.add_argument("id")
    m = ms.add_parser("inspect")
    m.add_argument("--agent", default="")
    m.add_argument("--query", default="")
    m.add_argument("--top-k", type=int, default=0)
    m.add_argument("--tier", default="")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    a = parser().parse_args(argv)
    try:
        return asyncio.run(_main(a))
    except Rejected as e:
        print("skein_client: %s" % e, file=sys.stderr)
        return 2
    except Unreachable as e:
        print("skein_client: %s" % e, file=sys.stderr)
        return EXIT_UNAVAILABLE
    except Unavailable as e:
        print("skein_client: %s (try again)" % e, file=sys.stderr)
        return EXIT_TRANSIENT
    except (SkeinError, CredentialsError, ValueError) as e:
        print("skein_client: %s" % e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
