"""The Python examples (examples/python/) as shipped, against the stand-in chat service: the
scheduled assistant under `exactly run`, and the agent's refund that needs approval."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import exactly

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "python")
sys.path.insert(0, EXAMPLES)
import chat_server  # noqa: E402


@pytest.fixture
def chat():
    server, records = chat_server.serve(0)
    yield f"http://127.0.0.1:{server.server_address[1]}", records
    server.shutdown()


def test_the_scheduled_assistant_posts_each_digest_once(db, exactly_bin, chat, tmp_path, uid):
    url, records = chat
    channel = f"#ops-{uid}"
    shipped = os.path.join(EXAMPLES, "assistant.toml")
    check = subprocess.run([exactly_bin, "check", shipped], capture_output=True, text=True)
    assert check.returncode == 0, check
    # The shipped file, firing every second, with this test's Python (which has the module).
    script = os.path.join(EXAMPLES, "assistant.py")
    text = open(shipped).read()
    assert 'every = "1m"' in text and 'command = ["python3", "assistant.py"]' in text
    jobs = tmp_path / "assistant.toml"
    jobs.write_text(text.replace('every = "1m"', 'every = "1s"').replace(
        'command = ["python3", "assistant.py"]',
        f"command = [{json.dumps(sys.executable)}, {json.dumps(script)}]"))
    env = dict(os.environ, ASSISTANT_CHAT_URL=url, ASSISTANT_CHANNEL=channel)
    sched = subprocess.Popen([exactly_bin, "--db", db, "run", str(jobs)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(records.all("messages")) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    sched.send_signal(signal.SIGTERM)
    out, err = sched.communicate(timeout=30)
    posted = [m for m in records.all("messages") if m.get("channel") == channel]
    assert len(posted) >= 3, err
    keys = [m["key"] for m in posted]
    assert len(set(keys)) == len(keys), f"a digest was posted twice: {keys}"
    store = exactly.open(db)
    assert all(store.get(k)["state"] == "done" for k in keys)
    # "Run now" by hand for a slot already posted: the same effect, suppressed.
    first = posted[0]["text"].split("digest for ", 1)[1].rsplit(": ", 1)[0]
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=60,
                       env=dict(env, EXACTLY_DB=db, EXACTLY_SCHEDULED_AT=first))
    assert r.returncode == 0 and r.stdout.startswith("duplicate"), r
    assert len([m for m in records.all("messages") if m.get("channel") == channel]) == len(posted)


def test_the_agents_refund_waits_for_approval_and_is_sent_once(db, cli, chat, uid):
    url, records = chat
    order = f"order-{uid}"
    env = dict(os.environ, EXACTLY_DB=db, AGENT_SHOP_URL=url)
    agent = [sys.executable, os.path.join(EXAMPLES, "approval_agent.py"), order, "42.00"]

    def run_agent():
        return subprocess.run(agent, capture_output=True, text=True, timeout=60, env=env)

    first = run_agent()
    assert first.returncode == 4, first
    key = first.stdout.strip().rsplit(" ", 1)[1]
    assert first.stdout.startswith("waiting for approval: exactly approve ")
    assert records.all("refunds") == []
    pending = json.loads(cli("status", "--json").stdout)["pending_approvals"]
    assert [p["terms_shown"] for p in pending if p["effect_key"] == key] == [
        f"Refund 42.00 EUR on order {order}"]
    assert cli("approve", key).returncode == 0
    sent = run_agent()
    assert sent.returncode == 0 and sent.stdout.startswith("done"), sent
    again = run_agent()  # a duplicate resume of the agent
    assert again.returncode == 0 and again.stdout.startswith("duplicate"), again
    assert [r["key"] for r in records.all("refunds")] == [key]
    assert cli("approve", key).returncode == 0  # already approved and consumed: nothing more
    assert run_agent().stdout.startswith("duplicate")
    assert len(records.all("refunds")) == 1


@pytest.mark.parametrize("form", ["with", "decorated"])
def test_the_short_refund_is_sent_once_in_either_form(db, chat, uid, form):
    url, records = chat
    order = f"order-{form}-{uid}"
    env = dict(os.environ, EXACTLY_DB=db, AGENT_SHOP_URL=url)
    argv = [sys.executable, os.path.join(EXAMPLES, "short_refund.py"), order, "9.50"]
    if form == "decorated":
        argv.append("--decorated")
    runs = [subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs
    key = exactly.key("refund", order, {"amount": "9.50"})
    assert runs[0].stdout.split() == ["done:", key]
    assert runs[1].stdout.split() == ["duplicate:", key]
    assert [r["key"] for r in records.all("refunds") if r["order"] == order] == [key]


def test_the_documented_short_forms_are_the_tested_example():
    """docs/languages.md shows short_refund.py's with form and decorator: each block there is
    a run of lines of the example this file runs, so the documentation cannot drift."""
    docs = open(os.path.join(EXAMPLES, "..", "..", "docs", "languages.md")).read()
    example = open(os.path.join(EXAMPLES, "short_refund.py")).read()
    shown = 0
    for block in docs.split("```python\n")[1:]:
        body = block.split("```", 1)[0]
        raw = body.splitlines()
        indent = min(len(ln) - len(ln.lstrip()) for ln in raw if ln.strip())
        lines = [ln[indent:] for ln in raw]
        if not any(ln.startswith(("def with_form", '@exactly.effect("refund"')) for ln in lines):
            continue
        text = "\n".join(lines)
        assert text in example, f"the documented block is not in short_refund.py:\n{text}"
        shown += 1
    assert shown == 2, "the with form and the derived decorator are both documented"
