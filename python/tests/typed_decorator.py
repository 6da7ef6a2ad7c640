"""Checked by test_typing.py with mypy --strict and pyright: the decorator keeps the
function's parameters (ParamSpec) and gives Outcome, or an awaitable Outcome for async def."""
import asyncio
import exactly

@exactly.effect("send-invoice", target="customer", inputs=("month",))
def send_invoice(key: str, customer: str, month: str, amount: int) -> str:
    return key

@exactly.effect("post", target="channel")
async def post(key: str, channel: str) -> str:
    await asyncio.sleep(0)
    return key

def main(lease: exactly.Lease) -> None:
    out: exactly.Outcome = send_invoice(lease, customer="c", month="m", amount=1)
    print(out.outcome)

async def amain(lease: exactly.Lease) -> None:
    out: exactly.Outcome = await post(lease, channel="x")
    print(out.response)
