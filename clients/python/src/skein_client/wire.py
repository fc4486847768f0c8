"""The wire rules of docs/contract.md: msgpack maps keyed by the JSON property names, timestamps
as RFC 3339 strings in JSON, binary values holding JSON text, and "v": 1 on every message."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Dict, Mapping

import msgpack  # type: ignore[import-untyped]

SCHEMA_VERSION = 1
CONTENT_TYPE = "Content-Type"
JSON = "application/json"
MSGPACK = "application/msgpack"
SERVICE_ERROR = "Nats-Service-Error"
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"


class VersionError(ValueError):
    """A message written with a schema version this client does not speak."""


def _plain(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        return _rfc3339(v)
    if isinstance(v, (bytes, bytearray)):
        return json.loads(bytes(v))
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _rfc3339(t: _dt.datetime) -> str:
    t = t.astimezone(_dt.timezone.utc)
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        s += (".%06d" % t.microsecond).rstrip("0")
    return s + "Z"


def decode(data: bytes) -> Dict[str, Any]:
    """Decodes a msgpack message into its JSON form and checks its schema version."""
    v = msgpack.unpackb(data, raw=False, timestamp=3)
    if not isinstance(v, dict):
        raise ValueError("a message is a msgpack map, got %s" % type(v).__name__)
    m: Dict[str, Any] = _plain(v)
    check_version(m)
    return m


def decode_json(data: bytes) -> Dict[str, Any]:
    m = json.loads(data)
    if not isinstance(m, dict):
        raise ValueError("a message is a JSON object")
    check_version(m)
    return m


def check_version(m: Mapping[str, Any]) -> None:
    if m.get("v") != SCHEMA_VERSION:
        raise VersionError("message schema version %r; this client speaks %d" % (m.get("v"), SCHEMA_VERSION))


def encode(m: Mapping[str, Any]) -> bytes:
    """Encodes a request as msgpack with the schema version."""
    data: bytes = msgpack.packb({"v": SCHEMA_VERSION, **m}, use_bin_type=True)
    return data


def encode_json(m: Mapping[str, Any]) -> bytes:
    return json.dumps({"v": SCHEMA_VERSION, **m}, ensure_ascii=False).encode()


def go_json(v: Any) -> str:
    """JSON exactly as Go's encoding/json writes it (the CLI's --json output): compact, <, >
    and & escaped, integral floats without a fraction, exponents only below 1e-6 or from 1e21."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v)
    if isinstance(v, str):
        return _go_str(v)
    if isinstance(v, Mapping):
        return "{" + ",".join(_go_str(str(k)) + ":" + go_json(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    raise TypeError("cannot encode %r" % type(v).__name__)


def _go_float(f: float) -> str:
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError("JSON has no %r" % f)
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        return repr(f).replace("e-0", "e-")  # Go writes 1e-7 where Python writes 1e-07
    if f == int(f):
        return str(int(f))
    from decimal import Decimal

    return format(Decimal(repr(f)), "f")


def _go_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append("\\u%04x" % o)
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
