"""Checked by test_typing.py with mypy --strict and pyright: the decorator keeps the
function's parameters (ParamSpec) and gives Outcome, or an awaitable Outcome for async def;
the lease first, or none under a current lease; the derived form with or without a key."""
import asyncio
import exactly

@exactly.effect("send-invoice", target="customer", inputs=("month",))
def send_invoice(key: str, customer: str, month: str, amount: int) -> str:
    return key

@exactly.effect("post", target="channel")
async def post(key: str, channel: str) -> str:
    await asyncio.sleep(0)
    return key

@exactly.effect("charge", exclude=("note",))
def charge(customer: str, cents: int, note: str = "") -> str:
    return exactly.current_key()

@exactly.effect("notify")
def notify(key: str, channel: str, text: str) -> str:
    return key

@exactly.effect("refund")
async def refund(order: str, amount: str) -> str:
    await asyncio.sleep(0)
    return exactly.current_key()

def main(lease: exactly.Lease) -> None:
    out: exactly.Outcome = send_invoice(lease, customer="c", month="m", amount=1)
    print(out.outcome)
    with lease:
        print(send_invoice(customer="c", month="m", amount=1).key)
        print(charge("cus_1", 500).response, charge(lease, "cus_1", cents=5, note="x").key)
        print(notify("#ops", text="hi").outcome)

async def amain(lease: exactly.Lease) -> None:
    out: exactly.Outcome = await post(lease, channel="x")
    print(out.response)
    r: exactly.Outcome = await refund("o-1", "9.50")
    print(r.key)
