"""exactly (this project), the `with store.effect(…) as e:` form, with an observer. Counted by
count_lines.py between the markers; run by run_peers.py."""
import os

import farside as far

DB, TTL = os.environ.get("PEER_DB", "exactly.db"), os.environ.get("PEER_TTL", "10m")

# --- guarded charge ---
import exactly

store = exactly.open(DB)

def charged(key):
    return exactly.HAPPENED if far.charged(key) else exactly.NOT_HAPPENED

with store.claim("charges", ttl=TTL):
    with store.effect(action="charge", target="order-42", inputs={"cents": 1200},
                      observe=charged) as e:
        if e.fresh:
            e.result = far.charge(e.key, "order-42", 1200)
# --- end ---
out = e.outcome
print("RESULT", out.outcome.value, out.response)
