"""exactly-once 0.2.1 (PyPI): the decorator on its SQLite store, with a prober
(check_then_decide) as the observer. Counted by count_lines.py; run by run_peers.py."""
import os

import farside as far

DB = os.environ.get("PEER_DB", "effects.db")

# --- guarded charge ---
from exactly_once import ProbeResult, Store, Verdict, check_then_decide, current_key, once

store = Store.sqlite(DB)

def charged(key):
    if far.charged(key):
        return ProbeResult(Verdict.COMMITTED, "charged")
    return ProbeResult(Verdict.NOT_COMMITTED)

@once(store, key=lambda order, cents: f"charge:{order}:{cents}", policy=check_then_decide(charged))
def charge(order, cents):
    return far.charge(current_key(), order, cents)

result = charge("order-42", 1200)
# --- end ---
print("RESULT", "returned", result)
