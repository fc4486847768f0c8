"""Offline checks of the wire rules and the credentials lookup."""

import datetime as dt
import json
import os
import stat
import tempfile
import unittest

import msgpack

from skein_client import creds, wire
from skein_client.client import RETRYABLE_CODES, RunResult

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs")


class WireTest(unittest.TestCase):
    def test_msgpack_rules(self):
        t = dt.datetime(2026, 11, 25, 10, 0, 0, 123000, tzinfo=dt.timezone.utc)
        data = msgpack.packb({"v": 1, "time": msgpack.Timestamp.from_datetime(t), "args": b'{"a":[1,"x"]}'}, use_bin_type=True)
        self.assertEqual(wire.decode(data), {"v": 1, "time": "2026-11-25T10:00:00.123Z", "args": {"a": [1, "x"]}})

    def test_version_is_checked(self):
        with self.assertRaises(wire.VersionError):
            wire.decode(msgpack.packb({"v": 2}))
        with self.assertRaises(wire.VersionError):
            wire.decode_json(b'{"session_id":"x"}')

    def test_go_json(self):
        self.assertEqual(wire.go_json({"a": 1.0, "b": 0.25, "c": 1e-7, "d": None, "e": "<&>\n\b"}),
                         '{"a":1,"b":0.25,"c":1e-7,"d":null,"e":"\\u003c\\u0026\\u003e\\n\\b"}')

    def test_run_result_shape(self):
        r = RunResult(session_id="s", outcome="success", final_text="hi", usage={"input_tokens": 3, "wall_time_s": 2, "cost_usd": None})
        d = json.loads(r.to_json())
        self.assertEqual(list(d), ["session_id", "outcome", "final_text", "usage"])  # reason only when set
        self.assertEqual(list(d["usage"]), ["input_tokens", "output_tokens", "cache_creation_input_tokens",
                                            "cache_read_input_tokens", "turns", "steps", "wall_time_s", "cost_usd"])
        self.assertIsNone(d["usage"]["cost_usd"])

    def test_retryable_codes_are_the_contracts(self):
        # The client's copy of the retry column must say what the one table of codes says.
        with open(os.path.join(DOCS, "asyncapi.json")) as f:
            table = json.load(f)["components"]["schemas"]["Code"]["x-skein"]
        self.assertEqual(RETRYABLE_CODES, {c for c, row in table.items() if row["retryable"]})


class CredsTest(unittest.TestCase):
    def test_lookup_order_and_file_checks(self):
        with tempfile.TemporaryDirectory() as home:
            os.mkdir(os.path.join(home, "creds"))
            path = os.path.join(home, "creds", "client.nk")
            seed = "SU" + "A" * 56
            with open(path, "w") as f:
                f.write("# skein identity: client\n# public key: U...\n%s\n" % seed)
            os.chmod(path, 0o600)
            self.assertEqual(creds.resolve(None, {"SKEIN_HOME": home}), path)
            self.assertEqual(creds.resolve("/flag", {"SKEIN_HOME": home, "SKEIN_CREDS": "/env"}), "/flag")
            self.assertEqual(creds.resolve(None, {"SKEIN_HOME": home, "SKEIN_CREDS": "/env"}), "/env")
            self.assertIsNone(creds.resolve(None, {"SKEIN_HOME": os.path.join(home, "none")}))
            c = creds.load(path)
            self.assertEqual((c.identity, c.seed, c.inbox_prefix), ("client", seed, "_INBOX.client"))
            os.chmod(path, 0o644)
            with self.assertRaisesRegex(creds.CredentialsError, "chmod 600"):
                creds.load(path)

    def test_identity_of_a_seed_file(self):
        # skein writes the seed alone (nats-py's nkeys_seed= reads nothing else); the identity is
        # the file's name, else the one the caller connects as. An older file's header wins.
        seed = "SU" + "A" * 56
        with tempfile.TemporaryDirectory() as d:
            def write(name, body):
                p = os.path.join(d, name)
                with open(p, "w") as f:
                    f.write(body)
                os.chmod(p, 0o600)
                return p

            for name, body, want in (
                ("admin.nk", seed + "\n", "admin"),
                ("laptop.key", seed + "\n", "client"),
                ("other.nk", "# skein identity: executor\n# public key: U...\n# Keep this file private.\n%s\n" % seed, "executor"),
            ):
                c = creds.load(write(name, body))
                self.assertEqual((c.identity, c.seed, c.inbox_prefix), (want, seed, "_INBOX." + want), name)


if __name__ == "__main__":
    unittest.main()
