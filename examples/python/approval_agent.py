"""An agent's tool call that needs a person's approval: refund an order.

    python3 approval_agent.py ORDER AMOUNT       # first time: waits for approval (exit 4)
    exactly approve KEY                          # or press `a` in `exactly top`
    python3 approval_agent.py ORDER AMOUNT       # now the refund is sent, once (exit 0)

The terms a person approves are stored with the effect key (the order and the amount), and the
approval is consumed by the one attempt that sends: a duplicate resume of the agent, or a
second approval, sends nothing more.
"""
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Union

import exactly

SHOP = os.environ.get("AGENT_SHOP_URL", "http://127.0.0.1:8765")


def refund(order: str, amount: str) -> exactly.Outcome:
    def send(key: str) -> str:
        req = urllib.request.Request(
            SHOP + "/refunds", method="POST",
            data=json.dumps({"order": order, "amount": amount}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": key})
        with urllib.request.urlopen(req, timeout=10) as r:
            return str(r.read().decode())

    def refunded(key: str) -> Union[exactly.Happened, exactly.Observation]:
        try:
            with urllib.request.urlopen(f"{SHOP}/refunds/{key}", timeout=10) as r:
                return exactly.Happened(r.read().decode())
        except urllib.error.HTTPError as e:
            return exactly.NOT_HAPPENED if e.code == 404 else exactly.CANT_TELL
        except OSError:
            return exactly.CANT_TELL

    store = exactly.open()
    with store.lease("refund-agent", ttl="2m") as lease:  # LeaseHeld while another has it
        return lease.effect(action="refund", target=order, inputs={"amount": amount},
                            terms=f"Refund {amount} EUR on order {order}",
                            needs_approval=True, observe=refunded).run(send)


if __name__ == "__main__":
    order, amount = sys.argv[1], sys.argv[2]
    out = refund(order, amount)
    if out.outcome == exactly.Kind.AWAITING_APPROVAL:
        print(f"waiting for approval: exactly approve {out.key}")
    else:
        print(f"{out.outcome}: {out.key} {out.response or out.reason or ''}")
    sys.exit(out.exit_code)
