"""`@exactly.effect(action)` with no target=: the key's facts derived from the function's named
parameters; the key from current_key() when the function does not take it first; the lease
optional where one is current."""
import asyncio

import pytest

import exactly
from exactly import Kind


def test_the_facts_come_from_the_named_parameters(store, uid):
    sent = []

    @exactly.effect("charge", exclude=("client",))
    def charge(customer, cents, currency="EUR", client=None):
        sent.append((exactly.current_key(), customer, cents, currency))
        return f"charged {cents}"

    with store.claim(f"billing-{uid}") as lease:
        out = charge(f"cus-{uid}", 500, client=object())
        again = charge(lease, customer=f"cus-{uid}", cents=500, client="another client")
    want = exactly.key("charge", f"cus-{uid}", {"cents": 500, "currency": "EUR"})
    assert out.outcome == Kind.DONE and out.key == want
    assert again.outcome == Kind.DUPLICATE, "client is excluded: not a fact of the key"
    assert sent == [(want, f"cus-{uid}", 500, "EUR")]
    with store.claim(f"billing-{uid}"):
        other = charge(f"cus-{uid}", 500, currency="USD")
    assert other.outcome == Kind.DONE and other.key != want


def test_a_parameter_named_target_is_the_target_and_a_first_key_gets_the_key(store, uid):
    @exactly.effect("post")
    def post(key, channel, target, text):
        return key

    with store.claim(f"chat-{uid}"):
        out = post(channel="#ops", target=f"user-{uid}", text="hi")
    assert out.key == exactly.key("post", f"user-{uid}", {"channel": "#ops", "text": "hi"})
    assert out.response == out.key


def test_explicit_forms_keep_their_keys_and_their_key_argument(store, uid):
    @exactly.effect("send-invoice", target="customer", inputs=("month",))
    def send_invoice(k, customer, month, amount):
        return k

    @exactly.effect("notify", target="channel")
    def notify(k, channel, text):
        return k

    with store.claim(f"inv-{uid}") as lease:
        a = send_invoice(lease, customer=f"c-{uid}", month="2026-11", amount=1)
        b = send_invoice(customer=f"c-{uid}", month="2026-11", amount=2)
        n = notify(f"#c-{uid}", "hello")
    assert a.key == exactly.key("send-invoice", f"c-{uid}", {"month": "2026-11"})
    assert a.response == a.key and b.outcome == Kind.DUPLICATE
    assert n.key == exactly.key("notify", f"#c-{uid}", {}), "explicit target: no inputs"


def test_what_the_key_cannot_hold_is_refused_before_anything_is_sent(store, uid):
    with pytest.raises(exactly.UsageError, match=r"\*\*extra"):
        @exactly.effect("charge")
        def charge(customer, cents, **extra):
            return "no"

    with pytest.raises(exactly.UsageError, match="not a parameter"):
        @exactly.effect("charge", exclude=("cleint",))
        def charge2(customer, client):
            return "no"

    @exactly.effect("charge")
    def charge3(customer, client):
        raise AssertionError("never sent")

    @exactly.effect("charge")
    def charge4(customer, cents):
        raise AssertionError("never sent")

    with store.claim(f"billing-{uid}"):
        with pytest.raises(exactly.UsageError, match="input client: an object is not a JSON"):
            charge3(f"cus-{uid}", object())
        with pytest.raises(exactly.UsageError, match="the target is object"):
            charge4(object(), 5)
        with pytest.raises(TypeError):
            charge4(f"cus-{uid}")  # a missing argument: no key is made without it
    with pytest.raises(exactly.UsageError, match="needs a lease"):
        charge4(f"cus-{uid}", 5)


def test_an_async_derived_effect_is_awaited(store, uid):
    @exactly.effect("notify")
    async def notify(channel, text):
        await asyncio.sleep(0)
        return exactly.current_key()

    async def main():
        async with store.claim(f"chat-{uid}"):
            return await notify(f"#c-{uid}", "hi")

    out = asyncio.run(main())
    assert out.outcome == Kind.DONE and out.response == out.key
    assert out.key == exactly.key("notify", f"#c-{uid}", {"text": "hi"})


def test_under_exactly_run_a_decorated_function_needs_no_lease_at_all(db, store, uid,
                                                                      monkeypatch):
    """The scheduler's environment names the job, its token and the database: a decorated
    function called with its own arguments only sends under that lease."""
    held = store.claim(f"sched-{uid}")
    monkeypatch.setenv("EXACTLY_DB", db)
    monkeypatch.setenv("EXACTLY_JOB", held.job)
    monkeypatch.setenv("EXACTLY_FENCING_TOKEN", str(held.token))

    @exactly.effect("charge")
    def charge(customer, cents):
        return exactly.current_key()

    out = charge(f"cus-{uid}", 500)
    assert out.outcome == Kind.DONE and out.response == out.key
    assert store.get(out.key)["job_key"] == held.job
    assert store.get(out.key)["fencing_token"] == held.token
