"""Connecting: give up soon with one line when no mesh answers, reconnect once connected, and
the credentials file skein writes used as it is by nats-py itself. The tests that need a mesh
run when SKEIN_NATS_URL names one (e2e/contract_test.go starts it)."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import unittest
from typing import List, Set, Tuple
from urllib.parse import urlparse

import nats

from skein_client import Client, Unreachable, creds

URL = os.environ.get("SKEIN_NATS_URL")
AGENT = os.environ.get("SKEIN_TEST_AGENT", "greeter")
# A guard against a hang, far above the timeouts the tests give: not a timing target.
HANG = 60.0


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NoMeshTest(unittest.IsolatedAsyncioTestCase):
    async def test_connect_gives_up_with_the_fix(self):
        url = "nats://127.0.0.1:%d" % closed_port()
        with self.assertRaises(Unreachable) as cm:
            await asyncio.wait_for(Client.connect(url, connect_timeout=1), HANG)
        msg = str(cm.exception)
        self.assertIn(url, msg)
        self.assertIn("skein up", msg)
        self.assertIn("--connect-timeout", msg)

    def test_cli_exits_69_with_one_line(self):
        env = dict(os.environ, SKEIN_NATS_URL="nats://127.0.0.1:%d" % closed_port(), SKEIN_CONNECT_TIMEOUT="1")
        p = subprocess.run([sys.executable, "-m", "skein_client", "submit", "hi"], env=env, capture_output=True, text=True, timeout=HANG)
        self.assertEqual(p.returncode, 69, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("no NATS server answered", p.stderr)

    def test_bad_timeout_is_refused(self):
        for env_value, flag in (("soon", []), ("", ["--connect-timeout", "0"])):
            env = dict(os.environ, SKEIN_NATS_URL="nats://127.0.0.1:1", SKEIN_CONNECT_TIMEOUT=env_value)
            p = subprocess.run([sys.executable, "-m", "skein_client"] + flag + ["submit", "hi"], env=env,
                               capture_output=True, text=True, timeout=HANG)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("above 0", p.stderr)


class Proxy:
    """A TCP relay in front of the mesh's NATS port that can drop every connection through it:
    the fault a lost network or a restarted server causes."""

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self.writers: Set[asyncio.StreamWriter] = set()
        self.relays: Set["asyncio.Task[None]"] = set()
        self.server: "asyncio.base_events.Server"

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return "nats://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.relays.add(task)
        sr, sw = await asyncio.open_connection(*self.target)
        self.writers |= {cw, sw}

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(cr, sw), pipe(sr, cw))

    def drop(self) -> None:
        for w in self.writers:
            w.close()
        self.writers.clear()

    async def close(self) -> None:
        self.server.close()
        self.drop()
        await asyncio.gather(*self.relays, return_exceptions=True)
        await self.server.wait_closed()


@unittest.skipUnless(URL, "needs a mesh: set SKEIN_NATS_URL (e2e/contract_test.go does)")
class MeshTest(unittest.IsolatedAsyncioTestCase):
    async def test_an_established_connection_reconnects(self):
        u = urlparse((URL or "").split(",")[0])
        proxy = Proxy((u.hostname or "127.0.0.1", u.port or 4222))
        c = await Client.connect(await proxy.start())
        try:
            first = await c.submit("Greet Ada", agent=AGENT)
            proxy.drop()
            # The next request waits for the reconnection (submit retries while unavailable).
            again = await asyncio.wait_for(c.submit("Greet Ada", agent=AGENT, session_id=first["session_id"]), HANG)
            self.assertTrue(again.get("duplicate"), again)
            self.assertTrue(c.nc.is_connected)
        finally:
            await c.close()
            await proxy.close()

    async def test_nats_py_reads_the_credentials_file_as_written(self):
        # The file skein up wrote, given to nats-py itself: no skein code reads it here.
        path = creds.resolve()
        self.assertIsNotNone(path, "no client.nk: set SKEIN_HOME to the mesh's")
        servers: List[str] = (URL or "").split(",")
        nc = await nats.connect(servers, nkeys_seed=path, inbox_prefix="_INBOX.client", allow_reconnect=False)
        try:
            body = {"v": 1, "task": "Greet Ada", "agent": AGENT}
            msg = await nc.request("skein.gateway.submit", json.dumps(body).encode(), timeout=30,
                                   headers={"Content-Type": "application/json"})
            rep = json.loads(msg.data)
            self.assertTrue(rep.get("session_id"), rep)
            self.assertNotIn("error", rep)
        finally:
            await nc.close()


if __name__ == "__main__":
    unittest.main()
