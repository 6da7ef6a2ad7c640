"""The `with` form of an effect (`with store.effect(…) as e: if e.fresh: e.result = send(e.key)`)
and the lease it finds on its own: the same step machine as `run`, the same outcomes."""
import asyncio
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

import exactly
from exactly import Kind


def charge(store, uid, observe=None, **kw):
    return store.effect(action="charge", target=f"cus-{uid}", inputs={"cents": 500},
                        observe=observe, **kw)


def test_a_fresh_block_sends_and_its_result_is_recorded_done(store, uid):
    sent = []
    with store.claim(f"billing-{uid}"):
        with charge(store, uid) as e:
            assert e.fresh
            with pytest.raises(exactly.UsageError, match="after the block"):
                e.outcome
            if e.fresh:
                e.result = {"id": "ch_1"}
                sent.append(e.key)
        assert e.outcome.outcome == Kind.DONE and e.outcome.response == '{"id": "ch_1"}'
        assert e.key == exactly.key("charge", f"cus-{uid}", {"cents": 500}) == sent[0]
        assert store.get(e.key)["state"] == "done"
        with charge(store, uid) as again:
            assert not again.fresh
            if again.fresh:
                sent.append(again.key)
        assert again.outcome.outcome == Kind.DUPLICATE
        assert again.outcome.response == '{"id": "ch_1"}'
    assert sent == [e.key], "a duplicate block must not send"


def test_the_with_form_gives_the_outcomes_run_gives(store, uid):
    """Each situation once with run and once with the with form, on twin effects: the same
    Outcome kinds, and the block is fresh exactly where run calls perform."""
    def situations(form):
        job = f"twin-{form}-{uid}"
        old = store.claim(job, ttl="1s", renew=False)
        lease = None
        while lease is None:  # the old token's lease runs out; a newer token takes the job
            lease = store.claim(job, ttl="1m")
        got = []

        def attempt(token, target, observe=None, needs_approval=False, send=True):
            eff = store.effect(job, token, action="pay", target=f"{form}-{target}-{uid}",
                               observe=observe, needs_approval=needs_approval)
            if form == "run":
                called = []

                def perform(k):
                    called.append(k)
                    if not send:
                        raise exactly.NotSent("no")
                    return "paid"
                out = eff.run(perform)
                got.append((out.outcome, bool(called) and send))
            else:
                with eff as e:
                    fresh = e.fresh
                    if e.fresh:
                        if not send:
                            raise exactly.NotSent("no")
                        e.result = "paid"
                got.append((e.outcome.outcome, fresh and send))

        attempt(lease.token, "a")                                   # done
        attempt(lease.token, "a")                                   # duplicate
        attempt(old.token, "b")                                     # fenced
        attempt(lease.token, "c", needs_approval=True)              # awaiting approval
        attempt(lease.token, "d", send=False)                       # not sent
        return got

    ran, blocks = situations("run"), situations("with")
    assert ran == blocks
    assert [k for k, _ in ran] == [Kind.DONE, Kind.DUPLICATE, Kind.FENCED,
                                   Kind.AWAITING_APPROVAL, Kind.NOT_SENT]


def test_a_raise_in_the_block_records_unknown_and_the_observer_settles_it(store, uid):
    verdict = [exactly.CANT_TELL]
    looked = []

    def observe(k):
        looked.append(k)
        return verdict[0]

    with store.claim(f"billing-{uid}"):
        with pytest.raises(ConnectionResetError):
            with charge(store, uid, observe) as e:
                assert e.fresh
                raise ConnectionResetError("the answer was lost")
        assert e.outcome.outcome == Kind.UNKNOWN
        assert isinstance(e.outcome.error, ConnectionResetError)
        assert store.get(e.key)["state"] == "unknown"
        assert looked == [], "the observer is asked before a retry, not after the send"
        with charge(store, uid, observe) as e2:          # the observer can't tell: in flight
            assert not e2.fresh
        assert e2.outcome.outcome == Kind.IN_FLIGHT and looked == [e.key]
        verdict[0] = exactly.NOT_HAPPENED                # it did not happen: send again
        with charge(store, uid, observe) as e3:
            assert e3.fresh
            e3.result = "ch_2"
        assert e3.outcome.outcome == Kind.DONE
        verdict[0] = exactly.HAPPENED
        with charge(store, uid, observe) as e4:
            assert not e4.fresh
        assert e4.outcome.outcome == Kind.DUPLICATE and e4.outcome.response == "ch_2"


def test_an_observer_that_says_happened_makes_the_retry_a_duplicate(store, uid):
    with store.claim(f"billing-{uid}"):
        with pytest.raises(TimeoutError):
            with charge(store, uid) as e:
                raise TimeoutError("no answer")
        with charge(store, uid, lambda k: exactly.Happened("ch_9")) as again:
            assert not again.fresh
        assert again.outcome.outcome == Kind.DUPLICATE and again.outcome.response == "ch_9"


def test_not_sent_in_the_block_releases_the_reservation(store, uid):
    with store.claim(f"billing-{uid}"):
        with charge(store, uid) as e:
            raise exactly.NotSent("the card service refused the connection")
        assert e.outcome.outcome == Kind.NOT_SENT          # swallowed: a promise, not an error
        assert e.outcome.reason == "the card service refused the connection"
        with charge(store, uid) as again:
            assert again.fresh
            again.result = "ch_3"
        assert again.outcome.outcome == Kind.DONE


def test_a_fresh_block_that_sets_no_result_is_recorded_unknown_and_raises(store, uid):
    with store.claim(f"billing-{uid}"):
        with pytest.raises(exactly.UsageError, match="without setting `e.result`"):
            with charge(store, uid) as e:
                assert e.fresh  # … and forgets e.result
        assert e.outcome.outcome == Kind.UNKNOWN
        assert store.get(e.key)["state"] == "unknown", "it may have been sent: never retried blindly"
        with charge(store, uid) as again:
            assert not again.fresh


def test_a_result_set_then_a_raise_is_done_and_the_raise_goes_on(store, uid):
    with store.claim(f"billing-{uid}"):
        with pytest.raises(KeyError):
            with charge(store, uid) as e:
                e.result = "ch_4"
                {}["logging the answer fails"]
        assert e.outcome.outcome == Kind.DONE and e.outcome.response == "ch_4"


def test_a_block_that_may_not_send_cannot_set_a_result(store, uid):
    with store.claim(f"billing-{uid}"):
        with charge(store, uid) as e:
            e.result = "ch_5"
        with pytest.raises(exactly.UsageError, match="not fresh"):
            with charge(store, uid) as again:
                again.result = "sent anyway"
        assert store.get(e.key)["response"] == "ch_5"


def test_a_coroutine_as_the_result_is_refused_and_nothing_is_recorded_sent(store, uid):
    async def send(k):
        return "never"

    with store.claim(f"billing-{uid}"):
        with pytest.raises(exactly.UsageError, match="awaitable"):
            with charge(store, uid) as e:
                e.result = send(e.key)
        assert e.outcome.outcome == Kind.NOT_SENT
        with charge(store, uid) as again:
            assert again.fresh
            again.result = "ch_6"


def test_async_with_awaits_the_send_on_the_loop(store, uid):
    async def main():
        async def observe(k):
            await asyncio.sleep(0)
            return exactly.NOT_HAPPENED

        async with store.claim(f"billing-{uid}"):
            async def one(i):
                async with store.effect(action="charge", target=f"cus-{uid}-{i}",
                                        observe=observe) as e:
                    if e.fresh:
                        await asyncio.sleep(0.01)
                        assert exactly.current_key() == e.key
                        e.result = f"ch_{i}"
                return e.outcome
            outs = await asyncio.gather(*(one(i) for i in range(16)))
            again = await one(3)
        return outs, again

    outs, again = asyncio.run(main())
    assert [o.outcome for o in outs] == [Kind.DONE] * 16
    assert again.outcome == Kind.DUPLICATE and again.response == "ch_3"


def test_the_lease_is_optional_where_one_is_current(store, uid, monkeypatch):
    with pytest.raises(exactly.UsageError, match="needs a lease"):
        store.effect(action="charge", target=f"cus-{uid}")
    with store.claim(f"outer-{uid}") as outer:
        assert exactly.current_lease() is outer
        assert store.effect(action="a", target="t").job == outer.job
        with store.lease(f"inner-{uid}") as inner:
            eff = store.effect(action="a", target="t")
            assert (eff.job, eff.token) == (inner.job, inner.token)
            assert store.effect(f"outer-{uid}", action="a", target="t").token == outer.token
        assert store.effect(action="a", target="t").job == outer.job

        seen = []
        t = threading.Thread(target=lambda: seen.append(exactly.current_lease()))
        t.start()
        t.join()
        assert seen == [None], "a thread you start has no current lease: pass it on"
    assert exactly.current_lease() is None
    # The scheduler's lease under `exactly run` (its environment), with no `with` at all.
    held = store.claim(f"sched-{uid}")
    monkeypatch.setenv("EXACTLY_JOB", held.job)
    monkeypatch.setenv("EXACTLY_FENCING_TOKEN", str(held.token))
    with store.effect(action="charge", target=f"cus-{uid}") as e:
        e.result = "ch_7"
    assert e.outcome.outcome == Kind.DONE
    assert store.get(e.key)["job_key"] == held.job


def test_the_shortest_form_runs_under_exactly_run(db, exactly_bin, tmp_path, uid):
    """A script that names no lease, run by the scheduler: its effects go under the run's
    lease (the job and token `exactly run` gives it), each firing slot's charge once."""
    keys = tmp_path / "keys"
    script = tmp_path / "charge.py"
    script.write_text(
        "import exactly, os\n"
        "store = exactly.open()\n"
        "with store.effect(action='charge', target='cus-1',\n"
        "                  inputs={'slot': os.environ['EXACTLY_SCHEDULED_AT']}) as e:\n"
        "    if e.fresh:\n"
        "        e.result = 'charged'\n"
        f"open({str(keys)!r}, 'a').write(e.outcome.outcome.value + ' ' + e.key + '\\n')\n")
    jobs = tmp_path / "jobs.toml"
    jobs.write_text(f'[[job]]\nname = "charge-{uid}"\nevery = "1s"\nlease = "5m"\n'
                    'overlap = "coalesce"\ntimeout = "2m"\n'
                    f"command = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n")
    sched = subprocess.Popen([exactly_bin, "--db", db, "run", str(jobs)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (not keys.exists() or len(keys.read_text().splitlines()) < 2) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    sched.send_signal(signal.SIGTERM)
    out, err = sched.communicate(timeout=30)
    lines = [ln.split() for ln in keys.read_text().splitlines()] if keys.exists() else []
    assert len(lines) >= 2, err
    assert {o for o, _ in lines} == {"done"}, lines
    assert len({k for _, k in lines}) == len(lines), "each slot is its own effect"
    store = exactly.open(db)
    assert all(store.get(k)["job_key"] == f"charge-{uid}" for _, k in lines)
