"""A real MCP client (the `mcp` SDK, streamable HTTP) for the tests: each call opens a client of its own."""

import asyncio
import json

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


async def _in_session(url: str, work):
    async with streamable_http_client(url.rstrip("/") + "/gradio_api/mcp/") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def list_tools(url: str) -> list:
    """The tools the app at `url` serves."""
    return asyncio.run(_in_session(url, lambda session: session.list_tools())).tools


def call(url: str, tool: str, arguments: dict):
    """One tool call, from a client of its own: the CallToolResult."""
    return asyncio.run(_in_session(url, lambda session: session.call_tool(tool, arguments)))


def answer(url: str, tool: str, arguments: dict):
    """A tool call that must succeed: its JSON result, parsed."""
    result = call(url, tool, arguments)
    assert not result.isError, result.content
    return json.loads(result.content[0].text)
