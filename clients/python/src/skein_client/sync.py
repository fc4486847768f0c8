"""A blocking wrapper of Client for code that does not run an event loop."""

from __future__ import annotations

import asyncio
import datetime as _dt
import threading
from typing import Any, Awaitable, Dict, Iterator, List, Mapping, Optional, TypeVar

from .client import Client, Message, OnDelta, RunResult

T = TypeVar("T")


class SyncClient:
    """The same operations as Client, blocking. It runs its own event loop on a daemon thread;
    close it (or use ``with``) when done."""

    def __init__(self, url: Optional[str] = None, *, creds: Optional[str] = None, namespace: Optional[str] = None,
                 name: str = "skein-python", connect_timeout: Optional[float] = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="skein-client", daemon=True)
        self._thread.start()
        try:
            self.client = self._call(Client.connect(url, creds=creds, namespace=namespace, name=name, connect_timeout=connect_timeout))
        except BaseException:
            self._stop()
            raise

    def _call(self, aw: Awaitable[T]) -> T:
        async def run() -> T:
            return await aw

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        try:
            self._call(self.client.close())
        finally:
            self._stop()

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, task: str, *, agent: Optional[str] = None, session_id: Optional[str] = None,
               budget: Optional[Mapping[str, float]] = None, timeout: float = 30.0,
               turn_id: Optional[str] = None, from_turn: Optional[str] = None) -> Message:
        return self._call(self.client.submit(task, agent=agent, session_id=session_id, budget=budget, timeout=timeout,
                                             turn_id=turn_id, from_turn=from_turn))

    def send(self, session_id: str, text: str, *, turn_id: Optional[str] = None, agent: Optional[str] = None,
             budget: Optional[Mapping[str, float]] = None, timeout: float = 30.0) -> Message:
        return self._call(self.client.send(session_id, text, turn_id=turn_id, agent=agent, budget=budget, timeout=timeout))

    def cancel(self, session_id: str, reason: str = "", by: str = "python") -> Message:
        return self._call(self.client.cancel(session_id, reason=reason, by=by))

    def session(self, session_id: str) -> Message:
        return self._call(self.client.session(session_id))

    def events(self, session_id: str, *, follow: bool = True, idle_timeout: Optional[float] = None) -> Iterator[Message]:
        agen = self.client.events(session_id, follow=follow, idle_timeout=idle_timeout)
        try:
            while True:
                try:
                    yield self._call(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._call(agen.aclose())

    def trace(self, session_id: str) -> List[Message]:
        return self._call(self.client.trace(session_id))

    def wait(self, session_id: str, timeout: Optional[float] = None) -> RunResult:
        return self._call(self.client.wait(session_id, timeout=timeout))

    def run(self, task: str, *, agent: Optional[str] = None, session_id: Optional[str] = None,
            budget: Optional[Mapping[str, float]] = None, timeout: Optional[float] = None,
            on_delta: Optional[OnDelta] = None) -> RunResult:
        """As Client.run; on_delta runs on the client's event loop thread."""
        return self._call(self.client.run(task, agent=agent, session_id=session_id, budget=budget, timeout=timeout,
                                          on_delta=on_delta))

    def usage(self, by: str = "agent", since: Optional[_dt.timedelta] = None) -> Dict[str, Any]:
        return self._call(self.client.usage(by=by, since=since))

    def memory_inspect(self, *, agent: str = "", query: str = "", top_k: int = 0, tier: str = "") -> Message:
        return self._call(self.client.memory_inspect(agent=agent, query=query, top_k=top_k, tier=tier))

    def memory_list(self, *, agent: str = "", tier: str = "", status: str = "", offset: int = 0, limit: int = 0) -> Message:
        return self._call(self.client.memory_list(agent=agent, tier=tier, status=status, offset=offset, limit=limit))

    def memory_get(self, entry_id: str) -> Message:
        return self._call(self.client.memory_get(entry_id))
