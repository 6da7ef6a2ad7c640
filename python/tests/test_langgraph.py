"""A real LangGraph graph (SQLite checkpointer) whose worker process is SIGKILLed mid-node and
resumed by a new process on the same thread: with exactly.langgraph.effect_node the far side
(which does not dedupe) sees each node's request exactly once, none lost; without it, the
resume sends again."""
import asyncio
import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid


import exactly

HERE = os.path.dirname(os.path.abspath(__file__))
# mid_*: after the far side got the request, before the node returned. The library's points:
# before the request (after_submitted), the answer in hand and not recorded (after_send),
# recorded and the node not yet checkpointed (after_done); and an outside SIGKILL at random.
POINTS = ["mid_charge", "mid_notify", "after_submitted", "after_send", "after_done", "random"]


def worker(tmp, thread, far, point, env):
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "langgraph_worker.py"), str(tmp / "exactly.db"),
         str(tmp / f"checkpoints-{thread}.db"), thread, far, point],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def one_round(tmp, far, point, i, guard_off, tag):
    thread = f"{tag}-{point}-{i}"
    env = dict(os.environ, EXACTLY_MAX_SKEW="200ms")
    if guard_off:
        env["EXACTLY_PY_GUARD_OFF"] = "1"
    first_env = dict(env)
    if point in ("after_submitted", "after_send", "after_done"):
        first_env["EXACTLY_FAULT"] = f"{point}:kill"
    p = worker(tmp, thread, far, point, first_env)
    if point == "random":
        time.sleep(random.uniform(1.0, 3.0))  # the import of langgraph takes a while
        p.send_signal(signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    killed = p.returncode == -signal.SIGKILL
    assert killed or point == "random" or (guard_off and point.startswith("after_")), \
        f"{point}: the worker was not killed: {p.returncode} {out} {err}"
    final = None
    for _ in range(3):  # a resume that meets the effect still in flight tries again
        again = worker(tmp, thread, far, "none", env)
        out2, err2 = again.communicate(timeout=120)
        if again.returncode == 0:
            final = json.loads(out2.strip().splitlines()[-1])
            break
    assert final is not None, f"{point}: the resumed thread did not finish: {out2} {err2}"
    return thread, killed, final


def run_rounds(tmp, rounds, guard_off=False):
    far = tmp / "far-side"
    far.mkdir()
    tag = uuid.uuid4().hex[:6]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(one_round, tmp, str(far), p, i, guard_off, tag)
                   for i in range(rounds) for p in POINTS]
        results = [f.result() for f in futures]
    requests = {}
    for n in os.listdir(far):
        kind, key, _ = n.split(".")
        with open(far / n) as f:
            body = json.load(f)
        requests.setdefault((kind, body.get("charge_id") or body.get("receipt")), []).append(key)
    return results, requests


def test_a_sigkilled_graph_resumed_sends_each_nodes_effect_once(tmp_path):
    rounds = int(os.environ.get("EXACTLY_PY_LANGGRAPH_ROUNDS", "3"))
    results, requests = run_rounds(tmp_path, rounds)
    kills = sum(k for _, k, _ in results)
    store = exactly.open(str(tmp_path / "exactly.db"))
    duplicates = sum(len(keys) - 1 for keys in requests.values())
    lost, open_rows = [], []
    for thread, _, final in results:
        charge_id = f"ch_cus-{thread}_500"
        assert final["charge_id"] == charge_id and final["receipt"] == f"receipt for {charge_id}"
        for kind, what in (("charge", charge_id), ("notify", final["receipt"])):
            keys = requests.get((kind, what), [])
            if not keys:
                lost.append((thread, kind))
            open_rows += [k for k in set(keys) if store.get(k)["state"] != "done"]
    print(f"langgraph kill test: {len(results)} threads, {len(requests)} effects, {kills} "
          f"SIGKILLs, {duplicates} duplicates, {len(lost)} lost, {len(open_rows)} left open")
    assert kills >= len(results) * 5 // 6, "nearly every round must kill its worker"
    assert duplicates == 0, requests
    assert lost == []
    assert open_rows == []
    assert len(requests) == 2 * len(results)


def test_without_the_wrapper_a_resumed_graph_sends_again(tmp_path):
    results, requests = run_rounds(tmp_path, 1, guard_off=True)
    duplicates = sum(len(keys) - 1 for keys in requests.values())
    print(f"langgraph without the wrapper: {len(results)} threads, {duplicates} duplicates")
    assert duplicates >= 2, "mid_charge and mid_notify each send twice when resumed"


def test_the_key_is_the_thread_the_node_and_the_facts_not_the_run(store, uid):
    """In one process, sync and async nodes: a second run of the thread whose checkpoints were
    lost gets each update back from the ledger and sends nothing; another thread sends."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    from exactly.langgraph import effect_node

    class State(TypedDict, total=False):
        customer: str
        charge_id: str
        receipt: str

    sent = []

    def charge(state):
        sent.append(("charge", exactly.current_key()))
        return {"charge_id": f"ch_{len(sent)}"}

    async def notify(state, config):
        sent.append(("notify", exactly.current_key()))
        return {"receipt": f"receipt for {state['charge_id']}"}

    def graph():
        b = StateGraph(State)
        b.add_node("charge", effect_node(charge, facts=("customer",), store=store))
        b.add_node("notify", effect_node(notify, facts=("charge_id",), store=store))
        b.add_edge(START, "charge")
        b.add_edge("charge", "notify")
        b.add_edge("notify", END)
        return b.compile(checkpointer=InMemorySaver())  # a new, empty one each time

    thread = f"t-{uid}"
    run = lambda t: asyncio.run(graph().ainvoke(  # noqa: E731
        {"customer": "cus-1"}, {"configurable": {"thread_id": t}}))
    first, again = run(thread), run(thread)
    assert first == again == {"customer": "cus-1", "charge_id": "ch_1",
                              "receipt": "receipt for ch_1"}
    assert sent == [("charge", exactly.key("charge", thread, {"customer": "cus-1"})),
                    ("notify", exactly.key("notify", thread, {"charge_id": "ch_1"}))]
    other = run(f"t2-{uid}")
    assert other["charge_id"] == "ch_3" and len(sent) == 4
