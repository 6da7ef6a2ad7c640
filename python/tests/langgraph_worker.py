"""One worker of the LangGraph kill test: runs (or resumes) one thread of a real LangGraph graph
with a SQLite checkpointer. The graph: `prepare` (pure) → `charge` (a card charge) → `notify`
(a receipt) → end; `charge` and `notify` each make one request to the far side (a folder: each
request is a new file, fsynced; it does not dedupe) and are wrapped by
exactly.langgraph.effect_node, keyed by the thread, the node and the state's facts.

argv: DB CHECKPOINTS THREAD FAR_SIDE_DIR POINT
POINT: `mid_charge`/`mid_notify` SIGKILL inside the node after its request reached the far side
(before the node returns); `none`; the library's own points come through EXACTLY_FAULT.
EXACTLY_PY_GUARD_OFF=1 runs the same nodes without the wrapper (a resume just sends again)."""
import json
import os
import signal
import sqlite3
import sys
import uuid
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

import exactly
from exactly.langgraph import effect_node

db, checkpoints, thread, far, point = sys.argv[1:6]
guarded = os.environ.get("EXACTLY_PY_GUARD_OFF") != "1"


class State(TypedDict, total=False):
    customer: str
    cents: int
    charge_id: str
    receipt: str


def request(kind, body):
    """One request to the far side: a new file named by the key the node passes on."""
    key = exactly.current_key() if guarded else f"{kind}-{thread}"
    path = os.path.join(far, f"{kind}.{key}.{uuid.uuid4().hex}")
    with open(path, "w") as f:
        f.write(json.dumps(body))
        f.flush()
        os.fsync(f.fileno())
    if point == f"mid_{kind}":
        os.kill(os.getpid(), signal.SIGKILL)
    return body


def seen(kind):
    """The observer: what the far side has under this key."""
    def look(key, state):
        for n in os.listdir(far):
            if n.startswith(f"{kind}.{key}."):
                with open(os.path.join(far, n)) as f:
                    return exactly.Happened(json.load(f))
        return exactly.NOT_HAPPENED
    return look


def prepare(state: State) -> State:
    return {"cents": state["cents"]}


def charge(state: State) -> State:
    return request("charge", {"charge_id": f"ch_{state['customer']}_{state['cents']}"})


def notify(state: State) -> State:
    return request("notify", {"receipt": f"receipt for {state['charge_id']}"})


store = exactly.open(db)
builder = StateGraph(State)
builder.add_node("prepare", prepare)
if guarded:
    builder.add_node("charge", effect_node(charge, facts=("customer", "cents"), store=store,
                                           observe=seen("charge"), ttl="3s"))
    builder.add_node("notify", effect_node(notify, facts=("charge_id",), store=store,
                                           observe=seen("notify"), ttl="3s"))
else:
    builder.add_node("charge", charge)
    builder.add_node("notify", notify)
builder.add_edge(START, "prepare")
builder.add_edge("prepare", "charge")
builder.add_edge("charge", "notify")
builder.add_edge("notify", END)

conn = sqlite3.connect(checkpoints, check_same_thread=False, timeout=30)
graph = builder.compile(checkpointer=SqliteSaver(conn))
config = {"configurable": {"thread_id": thread}}
if not graph.get_state(config).values:
    final = graph.invoke({"customer": f"cus-{thread}", "cents": 500}, config)
else:
    # Resume where the checkpoints left it. LangGraph's default durability saves a step's
    # checkpoint while the next step runs: a kill in `notify` may find `charge` not saved.
    final = graph.invoke(None, config)
print(json.dumps(final))
