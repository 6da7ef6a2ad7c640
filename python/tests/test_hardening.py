"""Issue 35's hardening: a coroutine from sync run, no lock held across the caller's code, one
normalisation of job names, a fenced send kept, `with claim()` while held, exceptions that
pickle, and inputs refused unless their names are strings and their numbers exact."""
import asyncio
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

import exactly
from exactly import Kind


# 1. A coroutine returned from sync run is refused before anything is recorded as sent.

def test_sync_run_refuses_a_perform_that_returns_a_coroutine(store, uid):
    lease = store.claim(f"coro-{uid}", ttl="1m")
    sent = []

    async def send_async(k):
        sent.append(k)
        return "sent"

    eff = lease.effect(action="send", target=uid)
    with pytest.raises(exactly.UsageError, match="arun"):
        eff.run(lambda k: send_async(k))
    row = store.get(eff.key)
    assert row is None or row["state"] not in ("done", "submitted", "unknown"), row
    assert sent == []
    # The effect is not lost: arun sends it now, once.
    out = asyncio.run(eff.arun(lambda k: send_async(k)))
    assert out.outcome == Kind.DONE and out.response == "sent" and len(sent) == 1
    lease.release()


def test_sync_run_refuses_an_observer_that_returns_a_coroutine(store, uid):
    lease = store.claim(f"coroobs-{uid}", ttl="1m")
    facts = dict(action="send", target=uid)
    first = lease.effect(**facts).run(lambda k: (_ for _ in ()).throw(ConnectionError("lost")))
    assert first.outcome == Kind.UNKNOWN

    async def look(k):
        return exactly.HAPPENED

    with pytest.raises(exactly.UsageError, match="arun"):
        lease.effect(**facts, observe=lambda k: look(k)).run(lambda k: "again")
    assert store.get(first.key)["state"] == "unknown"
    lease.release()


# 2./3. No lock held across perform or observe.

def test_64_concurrent_arun_on_one_store_finish(store, uid):
    lease = store.claim(f"gather-{uid}", ttl="5m")

    async def main():
        async def send(k):
            await asyncio.to_thread(time.sleep, 0.01)
            return "ok"

        effs = [lease.effect(action="send", target=f"{uid}-{i}") for i in range(64)]
        return await asyncio.wait_for(asyncio.gather(*(e.arun(send) for e in effs)), 60)

    outs = asyncio.run(main())
    assert [o.outcome for o in outs] == [Kind.DONE] * 64
    lease.release()


def test_a_store_call_from_the_loop_while_arun_waits(store, uid):
    lease = store.claim(f"loopget-{uid}", ttl="1m")

    async def main():
        gate = asyncio.Event()

        async def send(k):
            await gate.wait()
            return "ok"

        task = asyncio.ensure_future(lease.effect(action="send", target=uid).arun(send))
        await asyncio.sleep(0.3)
        # perform is waiting on the loop: a store call from the loop must not hang.
        t0 = time.monotonic()
        assert store.get(exactly.key("send", uid)) is not None
        assert time.monotonic() - t0 < 5
        gate.set()
        return await asyncio.wait_for(task, 20)

    assert asyncio.run(main()).outcome == Kind.DONE
    lease.release()


def _in_thread(fn, timeout=20):
    box = {}

    def go():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"deadlocked: still running after {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_store_call_from_inside_perform_and_observe(store, uid):
    lease = store.claim(f"inside-{uid}", ttl="1m")
    facts = dict(action="send", target=uid)
    seen = {}

    def lost(k):
        seen["perform"] = store.get(k)["state"]
        raise ConnectionError("lost")

    out = _in_thread(lambda: lease.effect(**facts).run(lost))
    assert out.outcome == Kind.UNKNOWN and seen["perform"] == "submitted"

    def look(k):
        seen["observe"] = store.get(k)["state"]
        return exactly.HAPPENED

    dup = _in_thread(lambda: lease.effect(**facts, observe=look).run(lambda k: "again"))
    assert dup.outcome == Kind.DUPLICATE and seen["observe"] == "unknown"
    lease.release()


def test_threads_proceed_while_one_perform_waits(store, uid):
    lease = store.claim(f"threads-{uid}", ttl="1m")
    release = threading.Event()
    started = threading.Event()

    def slow(k):
        started.set()
        release.wait(20)
        return "slow"

    t = threading.Thread(target=lambda: lease.effect(action="slow", target=uid).run(slow))
    t.start()
    assert started.wait(10)
    outs = [_in_thread(lambda i=i: lease.effect(action="fast", target=f"{uid}-{i}")
                       .run(lambda k: "fast"), timeout=10) for i in range(4)]
    release.set()
    t.join(20)
    assert [o.outcome for o in outs] == [Kind.DONE] * 4
    lease.release()


# 4. One normalisation of job names.

@pytest.mark.parametrize("name", ["billing{} ", "cafe\u0301{}"])
def test_renew_and_release_normalise_the_job_name_as_claim_does(db, store, uid, name):
    job = name.format(uid)
    lease = store.claim(job, ttl="1m", renew=False)
    assert lease is not None
    assert store.renew(job, lease.token, "1m") is True
    assert lease.renew() is True
    assert store.release(job, lease.token) is True
    again = store.claim(job, ttl="1m")
    assert again is not None and again.token > lease.token
    assert again.release() is True


def test_an_effect_under_exactly_run_finds_its_run_by_the_normalised_name(store, uid,
                                                                          monkeypatch):
    job = f"envjob-{uid}"
    monkeypatch.setenv("EXACTLY_JOB", job)
    monkeypatch.setenv("EXACTLY_RUN_ID", f"run-{uid}")
    lease = store.claim(job + " ", ttl="1m")
    assert lease.job == job
    out = store.effect(job + " ", lease.token, action="send", target=uid).run(lambda k: "ok")
    assert out.outcome == Kind.DONE
    assert store.get(out.key)["run_id"] == f"run-{uid}"
    lease.release()


# 5. A send fenced after it ran is unrecorded, its answer kept.

def test_a_perform_that_outlives_its_lease_is_unrecorded_with_its_response(db, store, uid):
    job = f"outlive-{uid}"
    lease = store.claim(job, ttl="300ms", renew=False)
    other = exactly.open(db)
    taken = []

    def slow(k):
        time.sleep(2.8)  # the lease and the 2 s clock-skew margin
        taken.append(other.claim(job, ttl="1m"))
        return "charged 42"

    out = lease.effect(action="charge", target=uid).run(slow)
    assert taken[0] is not None
    assert out.outcome == Kind.UNRECORDED and out.response == "charged 42", out
    assert store.get(out.key)["state"] == "submitted"
    taken[0].release()
    other.close()


# 6. `with store.claim(...)` while another holds the lease.

def test_with_claim_while_held_raises_lease_held(store, uid):
    job = f"withheld-{uid}"
    first = store.claim(job, ttl="1m")
    assert store.claim(job, ttl="1m") is None, "claim() stays None when held (the contract)"
    with pytest.raises(exactly.LeaseHeld) as e:
        with store.claim(job, ttl="1m") as lease:
            raise AssertionError(f"the block ran without the lease: {lease}")
    assert e.value.job == job and e.value.owner

    async def main():
        async with store.claim(job, ttl="1m") as lease:
            raise AssertionError(f"the block ran without the lease: {lease}")

    with pytest.raises(exactly.LeaseHeld):
        asyncio.run(main())
    first.release()


# 7. Exceptions pickle, through ProcessPoolExecutor too.

def _errors():
    out = exactly.Outcome(outcome=Kind.FENCED, key="k1", reason="newer token")
    return [
        exactly.UsageError("bad"), exactly.StoreError("db"), exactly.BusyError("busy"),
        exactly.Error("base"), exactly.LeaseHeld("job", "me@host:1", "2026-12-03T00:00:00Z"),
        exactly.Fenced(out), exactly.NotSent("nope"), exactly.NotSent(
            exactly.Outcome(outcome=Kind.NOT_SENT, key="k2", reason="refused")),
        exactly.Unknown(exactly.Outcome(outcome=Kind.UNKNOWN, key="k3", reason="lost")),
    ]


def _raise(i):
    raise _errors()[i]


def test_every_exception_pickles_and_names_exactly():
    for e in _errors():
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e) and back.args == e.args
        assert type(e).__module__ == "exactly", type(e)
    with pytest.raises(exactly.UsageError) as raised:
        exactly._native.parse_duration_ms("soon")
    assert type(raised.value).__module__ == "exactly"
    assert "exactly.UsageError" in repr(type(raised.value))


def test_exceptions_round_trip_through_a_process_pool():
    with ProcessPoolExecutor(1) as pool:
        for i, e in enumerate(_errors()):
            with pytest.raises(type(e)) as got:
                pool.submit(_raise, i).result(60)
            assert str(got.value) == str(e)
        with pytest.raises(exactly.UsageError):
            pool.submit(exactly._native.parse_duration_ms, "soon").result(60)


# 11. Inputs: names are strings, numbers exact; each refusal named.

@pytest.mark.parametrize("inputs, words", [
    ({1: "a"}, "input name 1 is an int, not a string"),
    ({True: "a"}, "input name True is a bool, not a string"),
    ({None: "a"}, "input name None is a NoneType, not a string"),
    ({"n": 2**64}, "input n: 18446744073709551616 is outside"),
    ({"n": -2**63 - 1}, "input n: -9223372036854775809 is outside"),
    ({"n": float("nan")}, "input n: nan is not a finite number"),
    ({"n": {"deep": [1, float("inf")]}}, "input n.deep[1]: inf is not a finite number"),
    ({"n": {1: "x"}}, "input n: name 1 is an int, not a string"),
    ({"n": {1, 2}}, "input n: a set is not a JSON value"),
])
def test_inputs_refused_with_a_named_error(inputs, words):
    with pytest.raises(exactly.UsageError) as e:
        exactly.key("pay", "t", inputs)
    assert words in str(e.value)


def test_exact_numbers_keep_their_keys():
    assert exactly.key("pay", "t", {"n": 2**64 - 1}) != exactly.key("pay", "t", {"n": 2**64 - 2})
    assert exactly.key("pay", "t", {"n": -2**63}) != exactly.key("pay", "t", {"n": -2**63 + 1})


def test_a_non_string_target_or_action_is_a_usage_error():
    with pytest.raises(exactly.UsageError, match="target must be a string, not int 42"):
        exactly.key("pay", 42)
    with pytest.raises(exactly.UsageError, match="action must be a string, not NoneType"):
        exactly.key(None, "t")


def test_happened_with_a_dict_settles_the_effect(store, uid):
    lease = store.claim(f"hapdict-{uid}", ttl="1m")
    facts = dict(action="send", target=uid)

    def lost(k):
        raise ConnectionError("lost")

    assert lease.effect(**facts).run(lost).outcome == Kind.UNKNOWN
    out = lease.effect(**facts, observe=lambda k: exactly.Happened({"id": "ch_1"})).run(
        lambda k: "again")
    assert out.outcome == Kind.DUPLICATE and out.response == '{"id": "ch_1"}', out
    assert store.get(out.key)["state"] == "done"
    lease.release()


def test_a_perform_return_is_stored_faithfully_or_refused(store, uid):
    lease = store.claim(f"ret-{uid}", ttl="1m")
    outs = {}
    for name, value in [("dict", {"id": 1}), ("bytes", b"ok \xc3\xa9"), ("str", "plain")]:
        outs[name] = lease.effect(action="send", target=f"{uid}-{name}").run(lambda k: value)
    assert outs["dict"].response == '{"id": 1}'
    assert outs["bytes"].response == "ok \u00e9"
    assert outs["str"].response == "plain"
    bad = lease.effect(action="send", target=f"{uid}-badbytes").run(lambda k: b"\xff\xfe")
    assert bad.outcome == Kind.DONE and bad.response == "base64://4=", bad
    obj = lease.effect(action="send", target=f"{uid}-obj").run(lambda k: object())
    assert obj.outcome == Kind.DONE and obj.response.startswith("<object object at"), obj
    lease.release()
