"""The client against a real mesh. `make test` runs these from e2e/python_client_test.go, which
starts the mesh; by hand: SKEIN_NATS_URL, SKEIN_HOME (its creds/client.nk) and SKEIN_TEST_AGENT
name a running mesh and one of its agents."""

import datetime as dt
import os
import time
import unittest

from skein_client import Client, Rejected, SkeinError, SyncClient, new_turn_id

URL = os.environ.get("SKEIN_NATS_URL")
AGENT = os.environ.get("SKEIN_TEST_AGENT", "greeter")


@unittest.skipUnless(URL, "needs a mesh: set SKEIN_NATS_URL (e2e/python_client_test.go does)")
class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.c = await Client.connect()

    async def asyncTearDown(self):
        await self.c.close()

    async def test_run_trace_session_and_duplicate(self):
        res = await self.c.run("Greet Ada", agent=AGENT, timeout=120)
        self.assertTrue(res.succeeded, res)
        self.assertIn("Ada", res.final_text)
        self.assertGreater(res.usage["input_tokens"], 0)
        events = await self.c.trace(res.session_id)
        self.assertEqual(events[0]["type"], "session_started")
        self.assertEqual(events[0]["attrs"]["caller"], "python")
        self.assertIn("usage", [e["type"] for e in events])
        self.assertTrue(all(e["session_id"] == res.session_id and e["v"] == 1 for e in events))
        s = await self.c.session(res.session_id)
        self.assertEqual((s["status"], s["outcome"]), ("done", res.outcome))
        again = await self.c.submit("Greet Ada", agent=AGENT, session_id=res.session_id)
        self.assertTrue(again.get("duplicate"), again)
        rep = await self.c.cancel(res.session_id, reason="too late")
        self.assertEqual((rep["status"], rep["no_op"]), ("already_finished", True))

    async def test_answer_streams_as_it_is_written(self):
        pieces = []
        res = await self.c.run("Tell me about skein", agent=AGENT, timeout=120,
                               on_delta=lambda d: pieces.append((time.monotonic(), d)))
        self.assertTrue(res.succeeded, res)
        deltas = [d for _, d in pieces]
        # In order, in several pieces (not the whole answer at once), the last marked done, and
        # together exactly the answer the trace keeps.
        self.assertGreater(len(deltas), 2, deltas)
        self.assertEqual([d["seq"] for d in deltas], list(range(1, len(deltas) + 1)))
        self.assertEqual({(d["session_id"], d["step_id"], d["turn"]) for d in deltas}, {(res.session_id, deltas[0]["step_id"], deltas[0]["turn"])})
        self.assertTrue(deltas[-1].get("done") and not any(d.get("done") for d in deltas[:-1]), deltas)
        self.assertEqual("".join(d.get("text", "") for d in deltas), res.final_text)
        self.assertLess(pieces[0][0], pieces[-1][0])

    async def test_conversation_turns(self):
        res = await self.c.run("Greet Ada", agent=AGENT, timeout=120)
        self.assertTrue(res.succeeded, res)
        turn = new_turn_id()
        second = await self.c.send(res.session_id, "Greet Bob", turn_id=turn, agent=AGENT)
        self.assertEqual(second["session_id"], res.session_id + "-2")
        retry = await self.c.send(res.session_id, "Greet Bob", turn_id=turn, agent=AGENT)
        self.assertEqual((retry["session_id"], retry.get("duplicate")), (second["session_id"], True))
        await self.c.wait(second["session_id"], timeout=120)
        again = await self.c.send(res.session_id, "Greet Bob", agent=AGENT)
        self.assertEqual(again["session_id"], res.session_id + "-3")
        self.assertFalse(again.get("duplicate"))
        await self.c.wait(again["session_id"], timeout=120)
        fork = await self.c.submit("Greet Cy", agent=AGENT, from_turn=second["session_id"])
        record = await self.c.session(fork["session_id"])
        self.assertEqual(record.get("forked_from"), second["session_id"])
        await self.c.wait(fork["session_id"], timeout=120)

    async def test_refusals(self):
        with self.assertRaises(Rejected) as cm:
            await self.c.submit("Greet Ada", agent="nobody-serves-this")
        self.assertEqual((cm.exception.service_code, cm.exception.code), ("422", "rejected"))
        self.assertIn("nobody-serves-this", str(cm.exception))
        with self.assertRaises(Rejected) as cm:
            await self.c.submit("   ", agent=AGENT)
        self.assertIn("task is empty", str(cm.exception))
        with self.assertRaises(Rejected) as cm:
            await self.c.cancel("no-such-session")
        self.assertEqual((cm.exception.service_code, cm.exception.code), ("404", "not_found"))
        with self.assertRaises(Rejected):
            await self.c.session("no-such-session")

    async def test_follow_events_live(self):
        rep = await self.c.submit("Greet Bob", agent=AGENT)
        seen = []
        events = self.c.events(rep["session_id"], idle_timeout=60)
        async for ev in events:
            seen.append(ev["type"])
            if ev["type"] == "usage":
                break
        await events.aclose()
        self.assertEqual(seen[0], "session_started")
        self.assertTrue({"step_started", "model_call", "final"} <= set(seen), seen)

    async def test_cancel_a_running_session(self):
        rep = await self.c.submit("Greet Cy", agent=AGENT, budget={"max_turns": 50})
        c = await self.c.cancel(rep["session_id"], reason="test")
        self.assertIn(c["status"], ("cancelling", "already_finished"))
        res = await self.c.wait(rep["session_id"], timeout=120)
        self.assertIn(res.outcome, ("cancelled", "success", "success_with_recovery"))

    async def test_usage_and_memory(self):
        await self.c.run("Greet Dee", agent=AGENT, timeout=120)
        u = await self.c.usage()
        row = [r for r in u["rows"] if r["key"] == AGENT]
        self.assertTrue(row and row[0]["sessions"] >= 1 and row[0]["input_tokens"] > 0, u)
        recent = await self.c.usage(by="day", since=dt.timedelta(hours=1))
        self.assertEqual(sum(r["sessions"] for r in recent["rows"]), sum(r["sessions"] for r in u["rows"]))
        page = await self.c.memory_list(agent=AGENT)
        self.assertIsInstance(page["entries"], list)
        self.assertEqual(page["total"], len(page["entries"]))
        ins = await self.c.memory_inspect(agent=AGENT, query="greet someone", top_k=3)
        self.assertIsInstance(ins["counts"], list)
        if page["entries"]:
            e = await self.c.memory_get(page["entries"][0]["id"])
            self.assertEqual(e["id"], page["entries"][0]["id"])
        with self.assertRaises(SkeinError) as cm:
            await self.c.memory_get("no-such-entry")
        self.assertEqual(cm.exception.code, "not_found")


@unittest.skipUnless(URL, "needs a mesh: set SKEIN_NATS_URL")
class SyncClientTest(unittest.TestCase):
    def test_blocking_run_and_events(self):
        with SyncClient() as c:
            res = c.run("Greet Eve", agent=AGENT, timeout=120)
            self.assertTrue(res.succeeded, res)
            types = [e["type"] for e in c.events(res.session_id, follow=False)]
            self.assertEqual(types[0], "session_started")
            later = [e["type"] for e in c.trace(res.session_id)]
            self.assertEqual(types, later[: len(types)])  # the miner may have added events since


if __name__ == "__main__":
    unittest.main()
