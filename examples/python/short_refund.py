"""The shortest guarded effect: a refund sent once, with an observer that settles a crash.

    python3 short_refund.py ORDER AMOUNT        # the with form
    python3 short_refund.py ORDER AMOUNT --decorated

Run twice, or kill it after the request left and run it again: the shop gets one refund.
"""
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, Union

import exactly

SHOP = os.environ.get("AGENT_SHOP_URL", "http://127.0.0.1:8765")


def send_refund(order: str, amount: str, key: str) -> Dict[str, Any]:
    body = json.dumps({"order": order, "amount": amount}).encode()
    req = urllib.request.Request(f"{SHOP}/refunds", data=body, method="POST",
                                 headers={"Idempotency-Key": key})
    with urllib.request.urlopen(req, timeout=10) as r:
        answer: Dict[str, Any] = json.load(r)
        return answer


def refunded(key: str) -> Union[exactly.Happened, exactly.Observation]:
    try:
        with urllib.request.urlopen(f"{SHOP}/refunds/{key}", timeout=10) as r:
            return exactly.Happened(json.load(r))
    except urllib.error.HTTPError as e:
        return exactly.NOT_HAPPENED if e.code == 404 else exactly.CANT_TELL


def with_form(store: exactly.Store, order: str, amount: str) -> exactly.Outcome:
    with store.lease("refunds"), store.effect(action="refund", target=order,
                                              inputs={"amount": amount}, observe=refunded) as e:
        if e.fresh:
            e.result = send_refund(order, amount, e.key)
    return e.outcome


@exactly.effect("refund", observe=lambda key, order, amount: refunded(key))
def refund(order: str, amount: str) -> Dict[str, Any]:  # target: order; inputs: amount
    return send_refund(order, amount, exactly.current_key())


if __name__ == "__main__":
    store = exactly.open()
    order, amount = sys.argv[1], sys.argv[2]
    if "--decorated" in sys.argv:
        with store.lease("refunds"):
            out = refund(order, amount)
    else:
        out = with_form(store, order, amount)
    print(f"{out.outcome}: {out.key}")
    sys.exit(out.exit_code)
