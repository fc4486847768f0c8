"""A client of `skein mcp serve` written with the official MCP Python SDK (e2e/mcpserve_test.go).

    mcp_client.py stdio SKEIN_BINARY ARG...   start the server on stdio with these arguments
    mcp_client.py http URL                    reach it over Streamable HTTP ($SKEIN_HTTP_TOKEN)

It lists the tools, calls the tool $MCP_AGENT with {"task": "say hello"} (with progress), then
calls it with {"task": "wait forever"} and cancels that request once the server has named its
session, and prints one JSON object of what it saw.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def exercise(session: ClientSession, agent: str) -> dict:
    await session.initialize()
    listed = await session.list_tools()
    out = {"tools": [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in listed.tools]}

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    res = await session.call_tool(agent, {"task": "say hello"}, progress_callback=on_progress)
    out["hello"] = {
        "text": "".join(getattr(c, "text", "") for c in res.content),
        "is_error": res.is_error,
        "structured": res.structured_content,
        "progress": progress,
    }

    # Cancel the second call as soon as its session is named: the SDK sends
    # notifications/cancelled for a request its caller abandons.
    named = anyio.Event()
    waiting = {}

    async def on_wait_progress(value, total, message):
        if message and message.startswith("session ") and "session" not in waiting:
            waiting["session"] = message.split()[1]
            named.set()

    async with anyio.create_task_group() as tg:
        async def call():
            await session.call_tool(agent, {"task": "wait forever"}, progress_callback=on_wait_progress)
            waiting["returned"] = True

        tg.start_soon(call)
        with anyio.fail_after(60):
            await named.wait()
        tg.cancel_scope.cancel()
    out["cancelled_session"] = waiting.get("session")
    out["cancelled_call_returned"] = waiting.get("returned", False)
    # The session stays usable after a cancelled request.
    again = await session.list_tools()
    out["tools_after_cancel"] = len(again.tools)
    return out


async def main() -> None:
    mode, agent = sys.argv[1], os.environ["MCP_AGENT"]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                out = await exercise(session, agent)
    else:
        headers = {"Authorization": "Bearer " + os.environ["SKEIN_HTTP_TOKEN"]}
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(sys.argv[2], http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    out = await exercise(session, agent)
    print(json.dumps(out))


anyio.run(main)
