"""Temporal (temporalio 1.x): a workflow with one activity, a worker and a client. Activities
run at least once (retried after a timeout or a lost worker), so the check of the far side is
written inside the activity. Needs a Temporal server at PEER_TEMPORAL. Counted by
count_lines.py; run_peers.py runs it only where a server can be started."""
import os

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import farside as far

TEMPORAL = os.environ.get("PEER_TEMPORAL", "localhost:7233")

# --- guarded charge ---
import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

@activity.defn
def send_charge(order: str, cents: int) -> str:
    key = f"{activity.info().workflow_id}:charge"
    if far.charged(key):  # the observer, by hand
        return "charged"
    return far.charge(key, order, cents)

@workflow.defn
class Charge:
    @workflow.run
    async def run(self, order: str, cents: int) -> str:
        return await workflow.execute_activity(send_charge, args=[order, cents],
                                               start_to_close_timeout=timedelta(seconds=30))

async def main():
    client = await Client.connect(TEMPORAL)
    async with Worker(client, task_queue="charges", workflows=[Charge],
                      activities=[send_charge], activity_executor=ThreadPoolExecutor()):
        return await client.execute_workflow(Charge.run, args=["order-42", 1200],
                                             id="charge-order-42-1200", task_queue="charges")

result = asyncio.run(main())
# --- end ---
print("RESULT", "returned", result)
