"""The asyncio client of a skein mesh, built on the published contract (docs/contract.md)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as _dt
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Union

import nats
import nats.errors
import nats.js.api as jsapi
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from . import creds as _creds
from . import wire

log = logging.getLogger("skein_client")

DEFAULT_NAMESPACE = "skein"
# How long connect waits for a first connection unless told (connect_timeout=,
# $SKEIN_CONNECT_TIMEOUT, --connect-timeout): the skein CLI gives up after about as long.
DEFAULT_CONNECT_TIMEOUT = 5.0
# Once connected, a lost connection is retried this often for this many times (two minutes:
# a server restart or a rolling update of the NATS cluster) before operations fail.
RECONNECT_WAIT_S = 1
RECONNECT_ATTEMPTS = 120
SUCCESS_OUTCOMES = frozenset({"success", "success_with_recovery"})
TERMINAL_EVENTS = frozenset({"final", "incomplete", "failed"})

Message = Dict[str, Any]
# Called with every Delta of a session (docs/json.md): {"session_id", "step_id", "turn", "seq",
# "text"?, "restart"?, "done"?}. It may be a coroutine function.
OnDelta = Callable[[Message], Union[None, Awaitable[None]]]
# Pending limits of a delta subscription (as pkg/delta's): a reader this far behind loses pieces
# (a seq gap says so), never memory. The trace keeps every turn's whole text either way.
DELTA_PENDING_MSGS = 4096
DELTA_PENDING_BYTES = 16 << 20


# The error codes with which the same request may succeed later: the retryable column of the
# mesh's one table of codes (docs/contract.md; the Code schema of docs/asyncapi.json).
RETRYABLE_CODES = frozenset({"conflict", "too_many_requests", "transient", "storage_full", "unavailable", "timeout"})


class SkeinError(Exception):
    """Something the mesh refused or could not do; str() says what and, where it can, the fix.
    code is the error's code from the mesh's table (docs/contract.md), "" when it came without one:
    decide on it, never on the text."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class Rejected(SkeinError):
    """The request is refused as it is: sending it again will not help."""

    def __init__(self, message: str, code: str = "rejected", service_code: str = "") -> None:
        super().__init__(message, code)
        self.service_code = service_code  # Nats-Service-Error-Code: the code's HTTP status (400, 404, 413, 415, 422)


class Unavailable(SkeinError):
    """The mesh could not serve the request now; the same request may succeed later."""


class Unreachable(Unavailable):
    """No NATS server of the mesh, or no service a request needs (the gateway, memoryd), answers:
    start the mesh or point the client at it."""


@dataclass
class RunResult:
    """What `skein run --json` prints for a finished session."""

    session_id: str
    outcome: str = ""
    final_text: str = ""
    reason: str = ""
    usage: Dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.outcome in SUCCESS_OUTCOMES

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"session_id": self.session_id, "outcome": self.outcome, "final_text": self.final_text}
        if self.reason:
            d["reason"] = self.reason
        u = self.usage
        d["usage"] = {
            "input_tokens": u.get("input_tokens", 0),
            "output_tokens": u.get("output_tokens", 0),
            "cache_creation_input_tokens": u.get("cache_creation_input_tokens", 0),
            "cache_read_input_tokens": u.get("cache_read_input_tokens", 0),
            "turns": u.get("turns", u.get("steps", 0)),
            "steps": u.get("turns", u.get("steps", 0)),  # the old name of turns, until the next version
            "wall_time_s": float(u.get("wall_time_s", 0.0)),
            "cost_usd": None if u.get("cost_usd") is None else float(u["cost_usd"]),
        }
        return d

    def to_json(self) -> str:
        """The same bytes `skein run --json` writes (without its newline)."""
        return wire.go_json(self.to_dict())


def new_session_id() -> str:
    """A fresh, subject-safe session id, minted by the client so a retried submit is one session."""
    return "s-" + uuid.uuid4().hex[:20]


def new_turn_id() -> str:
    """A fresh turn id, minted by the client before a message's first try so a retried submit
    is one turn, while the same text sent again is another."""
    return "t-" + uuid.uuid4().hex[:20]


_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_token(kind: str, s: str) -> None:
    if not _TOKEN.match(s or ""):
        raise Rejected("%s %r may hold only letters, digits, '-' and '_'" % (kind, s), code="bad_request", service_code="400")


class Client:
    """An async client. Make one with ``await Client.connect()``; close it with ``await close()``
    or ``async with``."""

    def __init__(self, nc: NATS, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.namespace = namespace or DEFAULT_NAMESPACE

    @classmethod
    async def connect(
        cls,
        url: Optional[str] = None,
        *,
        creds: Optional[str] = None,
        namespace: Optional[str] = None,
        name: str = "skein-python",
        connect_timeout: Optional[float] = None,
    ) -> "Client":
        """Connects to the mesh at url (default $SKEIN_NATS_URL; several servers separated by
        commas) with the credentials found as the CLI finds them: creds, $SKEIN_CREDS,
        $SKEIN_CREDS_DIR/client.nk, $SKEIN_HOME/creds/client.nk.

        It tries for connect_timeout seconds (default $SKEIN_CONNECT_TIMEOUT, else 5) and then
        raises Unreachable; credentials the server refuses raise SkeinError at once. Once
        connected, a lost connection is retried for about two minutes."""
        url = url or os.environ.get("SKEIN_NATS_URL")
        if not url:
            raise SkeinError("no NATS URL: pass url=, --nats, or set $SKEIN_NATS_URL (skein up prints it)")
        timeout = connect_timeout if connect_timeout is not None else _env_timeout()
        if not timeout > 0:
            raise SkeinError("connect timeout %r: want a number of seconds above 0" % timeout)
        servers = [u.strip() for u in url.split(",") if u.strip()]
        opts: Dict[str, Any] = {}
        path = _creds.resolve(creds)
        if path:
            c = _creds.load(path)
            if c.jwt:
                opts["user_credentials"] = path
            else:
                opts["nkeys_seed_str"] = c.seed
            opts["inbox_prefix"] = c.inbox_prefix
        return cls(await _dial(servers, name, timeout, path, opts), namespace or DEFAULT_NAMESPACE)

    async def close(self) -> None:
        await self.nc.drain()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # Names, as pkg/protocol derives them from the namespace.
    def subject(self, *parts: str) -> str:
        return ".".join((self.namespace,) + parts)

    def stream(self, base: str) -> str:
        if self.namespace == DEFAULT_NAMESPACE:
            return base
        return _sanitize(self.namespace).upper() + "_" + base

    def bucket(self, base: str) -> str:
        if self.namespace == DEFAULT_NAMESPACE:
            return base
        return _sanitize(self.namespace) + "_" + base

    # Requests.
    async def _request_json(self, subject: str, body: Mapping[str, Any], timeout: float) -> Message:
        """Sends a JSON request to the gateway and returns its reply; refusals raise."""
        try:
            msg = await self.nc.request(subject, wire.encode_json(body), timeout=timeout, headers={wire.CONTENT_TYPE: wire.JSON})
        except nats.errors.NoRespondersError as e:
            raise Unreachable("no gateway answers on %s (is the mesh up?)" % subject, "unavailable") from e
        except nats.errors.TimeoutError as e:
            raise Unavailable("the gateway did not answer on %s within %.0fs" % (subject, timeout), "timeout") from e
        headers = msg.headers or {}
        ct = headers.get(wire.CONTENT_TYPE, wire.MSGPACK)
        reply = wire.decode_json(msg.data) if ct.startswith(wire.JSON) else wire.decode(msg.data)
        svc = headers.get(wire.SERVICE_ERROR_CODE, "")
        if svc or reply.get("error"):
            why = reply.get("error") or headers.get(wire.SERVICE_ERROR, "refused")
            code = reply.get("code") or ""
            if code in RETRYABLE_CODES or (not code and svc == "503"):
                raise Unavailable(why, code or "unavailable")
            raise Rejected(why, code=code or "rejected", service_code=svc)
        return reply

    async def _request_msgpack(self, subject: str, body: Mapping[str, Any], timeout: float) -> Message:
        try:
            msg = await self.nc.request(subject, wire.encode(body), timeout=timeout)
        except nats.errors.NoRespondersError as e:
            raise Unreachable("nothing answers on %s (is memoryd running?)" % subject, "unavailable") from e
        except nats.errors.TimeoutError as e:
            raise Unavailable("no answer on %s within %.0fs" % (subject, timeout), "timeout") from e
        headers = msg.headers or {}
        reply = wire.decode(msg.data) if msg.data else {}
        why = reply.get("error") or headers.get(wire.SERVICE_ERROR, "")
        if why:
            # The reply's code says what kind of failure it is (a body-less refusal from an older
            # memoryd has only its status).
            code = reply.get("code") or ""
            if code in RETRYABLE_CODES or (not code and headers.get(wire.SERVICE_ERROR_CODE) == "503"):
                raise Unavailable("%s: %s" % (subject, why), code or "unavailable")
            raise SkeinError("%s: %s" % (subject, why), code)
        return reply

    async def submit(
        self,
        task: str,
        *,
        agent: Optional[str] = None,
        session_id: Optional[str] = None,
        budget: Optional[Mapping[str, float]] = None,
        timeout: float = 30.0,
        turn_id: Optional[str] = None,
        from_turn: Optional[str] = None,
    ) -> Message:
        """Starts a session and returns the gateway's reply ({"v", "session_id", "duplicate"?}).
        The session id is minted here when not given, so the tries this makes while the gateway
        is starting or slow are one session. With the id of a finished session, the task is the
        next turn of its conversation; turn_id (see send) tells a retry of a turn from a new one.
        from_turn forks: the new session continues the transcript of that finished turn.
        Raises Rejected or Unavailable."""
        session_id = session_id or new_session_id()
        body: Dict[str, Any] = {"session_id": session_id, "task": task, "caller": "python"}
        if agent:
            body["agent"] = agent
        if budget:
            body["budget"] = dict(budget)
        if turn_id:
            _check_token("turn id", turn_id)
            body["turn_id"] = turn_id
        if from_turn:
            _check_token("turn", from_turn)
            body["from"] = from_turn
        deadline = time.monotonic() + timeout
        wait = 0.05
        while True:
            try:
                return await self._request_json(self.subject("gateway", "submit"), body, timeout=min(5.0, max(0.1, deadline - time.monotonic())))
            except Unavailable:
                if time.monotonic() + wait >= deadline:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, 1.0)

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        turn_id: Optional[str] = None,
        agent: Optional[str] = None,
        budget: Optional[Mapping[str, float]] = None,
        timeout: float = 30.0,
    ) -> Message:
        """Sends a message to the conversation of session_id (any of its turns): the reply names
        the new turn's session. Every message is a new turn, the same text too; the turn id is
        minted here when not given, so the tries this makes are one turn. Pass the same turn_id
        to retry a message after an error that left its fate unknown."""
        return await self.submit(text, agent=agent, session_id=session_id, budget=budget, timeout=timeout,
                                 turn_id=turn_id or new_turn_id())

    async def cancel(self, session_id: str, reason: str = "", by: str = "python", timeout: float = 15.0) -> Message:
        """Cancels a session and its children; returns the cancel reply (status cancelling,
        already_cancelled or already_finished). An unknown session raises Rejected (404)."""
        body: Dict[str, Any] = {"session_id": session_id, "by": by}
        if reason:
            body["reason"] = reason
        return await self._request_json(self.subject("gateway", "cancel"), body, timeout=timeout)

    async def session(self, session_id: str) -> Message:
        """The session's record (protocol.Session in its JSON form)."""
        _check_token("session id", session_id)
        kv = await self.js.key_value(self.bucket("sessions"))
        try:
            entry = await kv.get(session_id)
        except nats.js.errors.KeyNotFoundError as e:
            raise Rejected("no session %s" % session_id, code="not_found", service_code="404") from e
        return wire.decode(entry.value or b"")

    async def events(self, session_id: str, *, follow: bool = True, idle_timeout: Optional[float] = None) -> AsyncGenerator[Message, None]:
        """The session's trace events from the first, in order. With follow it waits for new
        events (stop iterating when you have what you need); without, it ends at the last event
        written so far. idle_timeout bounds the wait for one event (None: no bound)."""
        _check_token("session id", session_id)
        sub = await self.js.subscribe(
            self.subject("trace", session_id),
            stream=self.stream("TRACE"),
            ordered_consumer=True,
            deliver_policy=jsapi.DeliverPolicy.ALL,
        )
        try:
            if not follow:
                info = await sub.consumer_info()
                if info.num_pending == 0 and (info.delivered is None or not info.delivered.consumer_seq):
                    return
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_timeout if idle_timeout is not None else 3600)
                except nats.errors.TimeoutError:
                    if idle_timeout is not None:
                        raise Unavailable("no event of session %s for %.0fs" % (session_id, idle_timeout))
                    continue
                yield wire.decode(msg.data)
                if not follow and msg.metadata.num_pending == 0:
                    return
        finally:
            try:
                await sub.unsubscribe()
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError, nats.errors.BadSubscriptionError):
                pass  # closing the connection ends the subscription anyway

    async def follow_deltas(self, session_id: str, on_delta: OnDelta) -> Subscription:
        """Calls on_delta with every piece of the session's model answers published from now on,
        as the model writes them (plain NATS, kept nowhere: follow before you submit, with a
        session id you minted, to see a turn from its first word). The pieces of one model turn
        (step_id, turn) carry seq 1, 2, 3 ...; restart voids the turn's text so far, done ends
        it. Unsubscribe the returned subscription when done."""
        _check_token("session id", session_id)

        async def cb(msg: Msg) -> None:
            try:
                d = wire.decode(msg.data)
            except (ValueError, wire.VersionError):
                return
            if d.get("session_id") != session_id:
                return
            r = on_delta(d)
            if r is not None:
                await r

        sub = await self.nc.subscribe(self.subject("delta", session_id), cb=cb,
                                      pending_msgs_limit=DELTA_PENDING_MSGS, pending_bytes_limit=DELTA_PENDING_BYTES)
        await self.nc.flush()  # the server has the subscription: nothing published after is missed
        return sub

    async def trace(self, session_id: str) -> List[Message]:
        """Every event of the session written so far."""
        return [ev async for ev in self.events(session_id, follow=False)]

    async def wait(self, session_id: str, timeout: Optional[float] = None) -> RunResult:
        """Follows the session until its usage event and returns what `skein run --json` prints."""
        res = RunResult(session_id=session_id)

        async def follow() -> RunResult:
            events = self.events(session_id)
            try:
                async for ev in events:
                    if ev.get("type") in TERMINAL_EVENTS:
                        res.outcome, res.final_text, res.reason = ev.get("outcome", ""), ev.get("text", ""), ev.get("reason", "")
                    elif ev.get("type") == "usage":
                        res.usage = dict(ev.get("report") or {})
                        if not res.outcome:
                            res.outcome = ev.get("outcome", "")
                        return res
            finally:
                await events.aclose()
            return res

        try:
            return await asyncio.wait_for(follow(), timeout)
        except asyncio.TimeoutError as e:
            raise Unavailable("session %s did not finish within %ss" % (session_id, timeout)) from e

    async def run(self, task: str, *, agent: Optional[str] = None, session_id: Optional[str] = None,
                  budget: Optional[Mapping[str, float]] = None, timeout: Optional[float] = None,
                  on_delta: Optional[OnDelta] = None) -> RunResult:
        """Submits a task and waits for its result. on_delta, when given, sees the session's model
        answers as they are written (see follow_deltas); the result is the same either way."""
        session_id = session_id or new_session_id()
        sub = await self.follow_deltas(session_id, on_delta) if on_delta else None
        try:
            rep = await self.submit(task, agent=agent, session_id=session_id, budget=budget)
            return await self.wait(rep["session_id"], timeout=timeout)
        finally:
            if sub is not None:
                with contextlib.suppress(nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError,
                                         nats.errors.BadSubscriptionError):
                    await sub.unsubscribe()

    async def usage_reports(self, since: Optional[_dt.timedelta] = None) -> Dict[str, Message]:
        """The last usage event of every session on the usage stream (ended within since)."""
        kw: Dict[str, Any] = {"deliver_policy": jsapi.DeliverPolicy.ALL}
        config = None
        if since is not None:
            start = _dt.datetime.now(_dt.timezone.utc) - since
            config = jsapi.ConsumerConfig(opt_start_time=start)
            kw = {"deliver_policy": jsapi.DeliverPolicy.BY_START_TIME}
        sub = await self.js.subscribe(self.subject("usage", ">"), stream=self.stream("USAGE"), ordered_consumer=True, config=config, **kw)
        out: Dict[str, Message] = {}
        try:
            info = await sub.consumer_info()
            if info.num_pending == 0 and (info.delivered is None or not info.delivered.consumer_seq):
                return out
            while True:
                msg = await sub.next_msg(timeout=10)
                try:
                    ev = wire.decode(msg.data)
                except (ValueError, wire.VersionError):
                    ev = {}
                if ev.get("report"):
                    out[ev["session_id"]] = ev
                if msg.metadata.num_pending == 0:
                    return out
        finally:
            await sub.unsubscribe()

    async def usage(self, by: str = "agent", since: Optional[_dt.timedelta] = None) -> Dict[str, Any]:
        """Totals per agent or per day, as `skein usage --json --by agent|day` prints them.
        (--by model needs the model price table, which is not part of the contract.)"""
        if by not in ("agent", "day"):
            raise ValueError("by must be agent or day (use `skein usage --by model` for models)")
        rows: Dict[str, Dict[str, Any]] = {}
        for ev in (await self.usage_reports(since)).values():
            if by == "agent":
                key = ev.get("agent", "")
            else:
                t = _dt.datetime.fromisoformat(ev["time"].replace("Z", "+00:00"))
                key = t.astimezone().strftime("%Y-%m-%d")
            r = rows.setdefault(key, {"key": key, "sessions": 0, "input_tokens": 0, "output_tokens": 0,
                                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                                      "cost_usd": 0.0, "cost_complete": True})
            rep = ev["report"]
            r["sessions"] += 1
            for k in ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
                r[k] += rep.get(k, 0)
            if rep.get("cost_usd") is None:
                r["cost_complete"] = False
            else:
                r["cost_usd"] += rep["cost_usd"]
        return {"by": by, "rows": [rows[k] for k in sorted(rows)]}

    # Memory (memoryd speaks msgpack).
    async def memory_inspect(self, *, agent: str = "", query: str = "", top_k: int = 0, tier: str = "", timeout: float = 30.0) -> Message:
        """Counts per agent, tier and status, and with a query the entries nearest it, scored as
        retrieval scores them."""
        body = {k: v for k, v in (("agent", agent), ("query", query), ("top_k", top_k), ("tier", tier)) if v}
        return await self._request_msgpack(self.subject("memory", "inspect"), body, timeout)

    async def memory_list(self, *, agent: str = "", tier: str = "", status: str = "", offset: int = 0, limit: int = 0,
                          timeout: float = 30.0) -> Message:
        """A page of entries ({"entries", "total"}); status "" is active, "*" every status."""
        body = {k: v for k, v in (("agent", agent), ("tier", tier), ("status", status), ("offset", offset), ("limit", limit)) if v}
        return await self._request_msgpack(self.subject("memory", "list"), body, timeout)

    async def memory_get(self, entry_id: str, timeout: float = 30.0) -> Message:
        """One entry."""
        rep = await self._request_msgpack(self.subject("memory", "get"), {"id": entry_id}, timeout)
        return rep.get("entry") or {}


def _env_timeout() -> float:
    raw = os.environ.get("SKEIN_CONNECT_TIMEOUT", "")
    if not raw:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v > 0:
        raise SkeinError("$SKEIN_CONNECT_TIMEOUT=%r: want a number of seconds above 0" % raw)
    return v


def _is_refusal(e: BaseException) -> bool:
    return isinstance(e, nats.errors.AuthorizationError) or "authorization" in str(e).lower()


async def _dial(servers: List[str], name: str, timeout: float, creds_path: Optional[str], opts: Dict[str, Any]) -> NATS:
    """A connection to one of servers, made within timeout seconds. nats-py retries a first
    connection as often as a lost one (61 tries 2 s apart by default, even without reconnects),
    so the wait is bounded here, and a refusal of the credentials ends it at once."""
    where = ", ".join(servers)
    loop = asyncio.get_running_loop()
    refused: "asyncio.Future[BaseException]" = loop.create_future()
    recent: "collections.deque[str]" = collections.deque(maxlen=3)  # bounded: errors repeat every try
    connected = False

    async def on_error(e: Exception) -> None:
        if not connected:
            recent.append(str(e) or type(e).__name__)
            if _is_refusal(e) and not refused.done():
                refused.set_result(e)
            return
        if isinstance(e, nats.errors.Error) and "permissions violation" in str(e).lower():
            log.warning("NATS refused an operation: the identity's permissions do not allow it (%s)", e)
        else:
            log.debug("NATS: %s", e)

    async def on_disconnected() -> None:
        if connected and not nc.is_closed:  # not the client's own close
            log.warning("lost the connection to NATS at %s; reconnecting for up to %ds", where, RECONNECT_WAIT_S * RECONNECT_ATTEMPTS)

    async def on_reconnected() -> None:
        log.info("reconnected to NATS at %s", where)

    nc = NATS()
    attempt = asyncio.ensure_future(nc.connect(
        servers=servers, name=name, connect_timeout=max(1, min(2, int(timeout))), error_cb=on_error,
        disconnected_cb=on_disconnected, reconnected_cb=on_reconnected, allow_reconnect=True,
        reconnect_time_wait=RECONNECT_WAIT_S, max_reconnect_attempts=RECONNECT_ATTEMPTS, **opts))
    waiting: "Set[asyncio.Future[Any]]" = {attempt, refused}
    done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if attempt in done and attempt.exception() is None:
        connected = True
        return nc
    attempt.cancel()
    with contextlib.suppress(BaseException):
        await attempt
    with contextlib.suppress(Exception):
        await nc.close()
    if refused.done():
        raise SkeinError("NATS at %s refused these credentials (%s): pass --creds FILE or set $SKEIN_CREDS; "
                         "skein up writes $SKEIN_HOME/creds/client.nk" % (where, creds_path or "none found"))
    why = "; ".join(dict.fromkeys(recent)) or (str(attempt.exception()) if attempt in done else "no answer")
    raise Unreachable("no NATS server answered at %s within %gs (%s): start the mesh (skein up) or pass --nats URL / "
                      "set $SKEIN_NATS_URL; --connect-timeout or $SKEIN_CONNECT_TIMEOUT waits longer" % (where, timeout, why))


def _sanitize(s: str) -> str:
    return re.sub(r"[.*> ]", "_", s)
