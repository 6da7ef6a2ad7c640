"""DBOS Transact (dbos 3.x) on its SQLite system database: a workflow with one step; a crashed
workflow is recovered at the next launch and its unrecorded step runs again, so the check of
the far side is written inside the step. Counted by count_lines.py; run by run_peers.py."""
import os

import farside as far

DB = os.environ.get("PEER_DB", "dbos.sqlite")

# --- guarded charge ---
from dbos import DBOS, SetWorkflowID

DBOS(config={"name": "charges", "system_database_url": f"sqlite:///{DB}"})

@DBOS.step()
def send_charge(order, cents):
    key = f"{DBOS.workflow_id}:charge"
    if far.charged(key):  # the observer, by hand
        return "charged"
    return far.charge(key, order, cents)

@DBOS.workflow()
def charge(order, cents):
    return send_charge(order, cents)

DBOS.launch()
with SetWorkflowID("charge-order-42-1200"):
    result = charge("order-42", 1200)
# --- end ---
print("RESULT", "returned", result)
DBOS.destroy()
