"""The far side of the MCP tests: a real MCP server (the official Python SDK) whose
`send_email` appends a line to the file $MAIL_OUTBOX, and whose `list_sent` reads it back.

$MAIL_PAUSE_AFTER_SEND names a file: once a mail is appended, the server writes its pid
there and sleeps (the first time only), so a test can SIGKILL it after the effect and before
the answer. $MAIL_SLOW_SECONDS makes every send take that long. $MAIL_HEADERS names a file
each send over HTTP appends its `Idempotency-Key` header to.
"""
import os
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("mail")
OUTBOX = os.environ["MAIL_OUTBOX"]


def meta_key(ctx: Context) -> str:
    meta = ctx.request_context.meta
    if meta is None:
        return ""
    if isinstance(meta, dict):
        return str(meta.get("EXACTLY_EFFECT_KEY", ""))
    extra = getattr(meta, "model_extra", None) or {}
    return str(extra.get("EXACTLY_EFFECT_KEY", getattr(meta, "EXACTLY_EFFECT_KEY", "")))


@server.tool()
def send_email(to: str, subject: str, body: str, ctx: Context) -> str:
    """Sends a mail (appends it to the outbox)."""
    heard = os.environ.get("MAIL_HEADERS")
    if heard:  # over HTTP: the Idempotency-Key header the call came with, "-" for none
        request = ctx.request_context.request
        got = request.headers.get("idempotency-key", "-") if request is not None else "-"
        with open(heard, "a", encoding="utf-8") as f:
            f.write(f"{to}|{got}\n")
    with open(OUTBOX, "a", encoding="utf-8") as f:
        f.write(f"sent|{to}|{subject}|{body}|key={meta_key(ctx)}\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("MAIL_SLOW_SECONDS", "0")))
    pause = os.environ.get("MAIL_PAUSE_AFTER_SEND")
    if pause and not os.path.exists(pause):
        with open(pause, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    return f"sent to {to}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def list_sent() -> str:
    """Every mail sent so far, one per line."""
    try:
        with open(OUTBOX, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def cancel_booking(booking: str) -> str:
    """Cancels a booking (appends it to the outbox)."""
    with open(OUTBOX, "a", encoding="utf-8") as f:
        f.write(f"cancelled|{booking}\n")
    return f"cancelled {booking}"


@server.tool()
def book_table(restaurant: str, guests: int) -> str:
    """Books a table (appends it to the outbox)."""
    with open(OUTBOX, "a", encoding="utf-8") as f:
        f.write(f"booked|{restaurant}|{guests}\n")
    return f"booked {restaurant} for {guests}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def count_slowly(n: int, ctx: Context) -> str:
    """Counts to n, reporting progress at each step (read-only: passed through)."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return f"counted to {n}"


@server.resource("mail://outbox")
def outbox() -> str:
    """The outbox, as a resource."""
    return list_sent()


@server.prompt()
def reply(to: str) -> str:
    """A prompt to reply to someone."""
    return f"Write a reply to {to}."


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["http"]:  # http PORT: streamable HTTP on 127.0.0.1:PORT/mcp
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
