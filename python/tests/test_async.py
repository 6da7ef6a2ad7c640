"""asyncio: async perform and observe callables, the decorator, `async with` a lease."""
import asyncio

import exactly
from exactly import Kind


def test_async_perform_and_observe(store, uid):
    async def main():
        async with store.claim(f"async-{uid}", ttl="1m") as lease:
            facts = dict(action="send", target=uid)

            async def lost(key):
                await asyncio.sleep(0.01)
                raise ConnectionError("lost")

            first = await lease.effect(**facts).arun(lost)
            assert first.outcome == Kind.UNKNOWN

            async def look(key):
                await asyncio.sleep(0.01)
                return exactly.NOT_HAPPENED

            ran_on = []

            async def send(key):
                ran_on.append(asyncio.get_running_loop())
                await asyncio.sleep(0.01)
                return "sent " + key

            out = await lease.effect(**facts, observe=look).arun(send)
            assert out.outcome == Kind.DONE and out.response == "sent " + out.key
            assert ran_on == [asyncio.get_running_loop()], "perform runs on the caller's loop"
            dup = await lease.effect(**facts).arun(send)
            assert dup.outcome == Kind.DUPLICATE and len(ran_on) == 1

    asyncio.run(main())


def test_sync_run_refuses_an_async_perform(store, uid):
    lease = store.claim(f"asyncsync-{uid}", ttl="1m")

    async def send(key):
        return "x"

    try:
        lease.effect(action="a", target=uid).run(send)
    except exactly.UsageError as e:
        assert "arun" in str(e)
    else:
        raise AssertionError("run() must refuse a coroutine function")
    assert store.get(exactly.key("a", uid)) is None, "refused before anything was written"
    lease.release()


def test_decorator_sync_and_async(store, uid):
    sent = []

    @exactly.effect("send-invoice", target="customer", inputs=("month",),
                    terms=lambda customer, month, amount: f"Invoice {customer} {amount}")
    def send_invoice(key, customer, month, amount):
        sent.append((key, customer, month, amount))
        return f"invoice for {customer}"

    @exactly.effect("notify", target="channel")
    async def notify(key, channel, text):
        await asyncio.sleep(0)
        sent.append((key, channel))
        return "posted"

    with store.claim(f"deco-{uid}", ttl="1m") as lease:
        out = send_invoice(lease, customer=f"c-{uid}", month="2026-11", amount=120)
        assert out.outcome == Kind.DONE
        assert out.key == exactly.key("send-invoice", f"c-{uid}", {"month": "2026-11"})
        # amount is not a consequential input: the same key, a duplicate, not sent again.
        again = send_invoice(lease, f"c-{uid}", "2026-11", 999)
        assert again.outcome == Kind.DUPLICATE and len(sent) == 1
        a = asyncio.run(notify(lease, channel=f"#ops-{uid}", text="hi"))
        b = asyncio.run(notify(lease, channel=f"#ops-{uid}", text="hi"))
        assert (a.outcome, b.outcome) == (Kind.DONE, Kind.DUPLICATE) and len(sent) == 2
