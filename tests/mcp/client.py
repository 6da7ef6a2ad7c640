"""The agent's side of the MCP tests: a real MCP client (the official Python SDK) that starts
`exactly mcp` as its server and calls tools through it.

argv[1] is JSON: {"gateway": [command...], "calls": [[tool, arguments], ...],
"list_tools": bool, "parallel": bool, "extras": bool} (parallel: all calls at once, answers in call order; extras: first the resources and prompts,
as {"resources": …, "resource": …, "prompts": …, "prompt": …}; elicit: {"answer": "accept" |
"decline" | "accept_once_sent", "log": path}: the client supports elicitation, appends each
request's message to log and answers so, accept_once_sent only once $MAIL_OUTBOX has a line). A call
["wait_for_file", {"path": p}] is not made: the client waits (up to 120 s) until the file p exists
and says {"waited": p}, so a test can change the world between two calls. Prints one JSON line per answer as it comes: {"tools": [...]},
{"result": CallToolResult, "progress": [messages]}, or {"error": text} (then exits 3).
"""
import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters, types


def say(obj):
    print(json.dumps(obj), flush=True)


async def main(spec):
    cmd = spec["gateway"]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    extra = {}
    elicit = spec.get("elicit")
    if elicit:

        async def on_elicit(context, request):
            with open(elicit["log"], "a", encoding="utf-8") as f:
                f.write(request.message.replace("\n", " ") + "\n")
            answer = elicit["answer"]
            if answer == "accept_once_sent":
                outbox = os.environ["MAIL_OUTBOX"]
                for _ in range(600):
                    if os.path.exists(outbox) and os.path.getsize(outbox) > 0:
                        break
                    await asyncio.sleep(0.1)
                answer = "accept"
            return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

        extra["elicitation_callback"] = on_elicit
    async with Client(params, **extra) as client:
        if spec.get("list_tools"):
            tools = await client.list_tools()
            say({"tools": [t.model_dump(by_alias=True, exclude_none=True) for t in tools.tools]})
        if spec.get("extras"):
            dump = lambda x: x.model_dump(by_alias=True, exclude_none=True, mode="json")
            say(
                {
                    "resources": dump(await client.list_resources()),
                    "resource": dump(await client.read_resource("mail://outbox")),
                    "prompts": dump(await client.list_prompts()),
                    "prompt": dump(await client.get_prompt("reply", {"to": "bob"})),
                }
            )

        async def call(tool, arguments):
            progress = []

            async def on_progress(p, total, message):
                progress.append(message or str(p))

            result = await client.call_tool(tool, arguments, progress_callback=on_progress)
            return {
                "result": result.model_dump(by_alias=True, exclude_none=True),
                "progress": progress,
            }

        calls = spec.get("calls", [])
        if spec.get("parallel"):
            for answer in await asyncio.gather(*(call(t, a) for t, a in calls)):
                say(answer)
        else:
            for tool, arguments in calls:
                if tool == "wait_for_file":
                    for _ in range(1200):
                        if os.path.exists(arguments["path"]):
                            break
                        await asyncio.sleep(0.1)
                    say({"waited": arguments["path"]})
                    continue
                say(await call(tool, arguments))


if __name__ == "__main__":
    try:
        asyncio.run(main(json.loads(sys.argv[1])))
    except BaseException as e:  # the gateway died under us: say so, as an agent would see it
        say({"error": repr(e)})
        sys.exit(3)
