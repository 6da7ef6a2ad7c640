"""The latency `exactly mcp` adds (docs/mcp.md): one client session straight to the test server,
one through the gateway; per call, a pass-through call (`list_sent`, read-only) and a guarded
call (`send_email` with new facts each time). Prints the median and p95 in milliseconds.

    python latency.py EXACTLY_BIN DB N
"""
import asyncio
import os
import statistics
import sys
import tempfile
import time

from mcp import Client, StdioServerParameters

HERE = os.path.dirname(os.path.abspath(__file__))


async def measure(cmd, n, guarded_tool):
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    out = {"list_sent": [], guarded_tool: []}
    async with Client(params) as client:
        await client.list_tools()
        for i in range(n):
            t = time.perf_counter()
            await client.call_tool("list_sent", {})
            out["list_sent"].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await client.call_tool(
                guarded_tool, {"to": f"u{i}@example.com", "subject": "s", "body": f"{os.getpid()}-{i}"}
            )
            out[guarded_tool].append((time.perf_counter() - t) * 1000)
    return out


def show(label, xs):
    xs = sorted(xs)
    p95 = xs[int(len(xs) * 0.95) - 1]
    print(f"{label:<34} median {statistics.median(xs):6.2f} ms   p95 {p95:6.2f} ms")


async def main():
    exe, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tempfile.TemporaryDirectory() as d:
        os.environ["MAIL_OUTBOX"] = os.path.join(d, "outbox")
        server = [sys.executable, os.path.join(HERE, "mail_server.py")]
        direct = await measure(server, n, "send_email")
        gw = await measure([exe, "--db", db, "mcp", "--name", "latency", "--"] + server, n, "send_email")
    show("direct: list_sent", direct["list_sent"])
    show("through exactly mcp: list_sent", gw["list_sent"])
    show("direct: send_email", direct["send_email"])
    show("through exactly mcp: send_email", gw["send_email"])


asyncio.run(main())
