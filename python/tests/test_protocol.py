"""The protocol's outcomes from Python, on a real database, against the real CLI."""
import json
import threading
import time

import pytest

import exactly
from exactly import Kind


def test_key_vectors_are_the_clis(cli):
    vectors = [
        ("send-invoice", "customer-42", {"month": "2026-11"}),
        ("send-invoice", "customer-42", {}),
        ("pay", "acct:7", {"amount": "120.00", "currency": "EUR"}),
        ("notify", "ünïcode-ziel", {"text": "grüße\nzweite zeile", "a=b": "c"}),
    ]
    for action, target, inputs in vectors:
        args = ["key", "--action", action, "--target", target]
        for k, v in inputs.items():
            args += ["--input", f"{k}={v}"]
        if any("=" in k or "\n" in v for k, v in inputs.items()):
            args = ["key", "--action", action, "--target", target, "--input-json", "-"]
            r = cli(*args, input=json.dumps(inputs))
        else:
            r = cli(*args)
        assert r.returncode == 0, r.stderr
        assert exactly.key(action, target, inputs) == r.stdout.strip()
    # JSON values other than strings: as `--input-json` reads them.
    inputs = {"amount": 120, "lines": [1, 2], "urgent": True, "note": None}
    r = cli("key", "--action", "pay", "--target", "t", "--input-json", "-",
            input=json.dumps(inputs))
    assert r.returncode == 0, r.stderr
    assert exactly.key("pay", "t", inputs) == r.stdout.strip()


def test_ambiguous_keys_are_refused():
    with pytest.raises(exactly.UsageError):
        exactly.key("a|b", "t", {})
    with pytest.raises(exactly.UsageError):
        exactly.key("a", "", {})
    with pytest.raises(exactly.UsageError):
        exactly.key("a", "t", {"x": object()})


def test_done_then_duplicate_replays_the_stored_answer(store, uid):
    lease = store.claim(f"inv-{uid}", ttl="1m")
    assert lease is not None and lease.token >= 1
    sent = []
    eff = store.effect(lease.job, lease.token, action="send-invoice", target=f"c-{uid}",
                       inputs={"month": "2026-11"})
    out = eff.run(lambda key: sent.append(key) or {"id": "inv_1"})
    assert out.outcome == Kind.DONE and out.outcome == "done" and out.done
    assert out.response == '{"id": "inv_1"}'
    assert sent == [eff.key] and out.key == exactly.key("send-invoice", f"c-{uid}",
                                                        {"month": "2026-11"})
    again = eff.run(lambda key: sent.append(key))
    assert again.outcome == Kind.DUPLICATE and again.response == '{"id": "inv_1"}'
    assert sent == [eff.key], "a duplicate must not call perform"
    assert store.get(eff.key)["state"] == "done"
    lease.release()


def test_a_held_lease_is_none_and_a_stale_token_is_fenced(db, store, uid):
    job = f"fence-{uid}"
    first = store.claim(job, ttl="1m")
    assert store.claim(job, ttl="1m") is None
    with pytest.raises(exactly.LeaseHeld):
        store.lease(job, ttl="1m")
    assert first.release()
    second = store.claim(job, ttl="1m")
    assert second.token > first.token
    out = first.effect(action="write", target=f"t-{uid}").run(lambda k: "written")
    assert out.outcome == Kind.FENCED and out.exit_code == 3
    with pytest.raises(exactly.Fenced):
        out.raise_for_outcome()
    assert store.get(out.key) is None, "a fenced write leaves no row"
    assert not first.renew()
    second.release()


def test_a_raise_leaves_unknown_never_done_never_a_silent_retry(store, uid):
    lease = store.claim(f"raise-{uid}", ttl="1m")
    eff = lease.effect(action="send", target=f"t-{uid}")

    def lost(key):
        raise ConnectionResetError("the answer was lost")

    out = eff.run(lost)
    assert out.outcome == Kind.UNKNOWN and out.exit_code == 6
    assert isinstance(out.error, ConnectionResetError)
    assert "ConnectionResetError" in out.reason
    assert store.get(eff.key)["state"] == "unknown"
    calls = []
    again = eff.run(lambda k: calls.append(k))
    assert again.outcome == Kind.IN_FLIGHT and calls == []
    with pytest.raises(exactly.InFlight):
        again.raise_for_outcome()
    lease.release()


@pytest.mark.parametrize("verdict,expect,sends", [
    (exactly.HAPPENED, Kind.DUPLICATE, 0),
    (exactly.Happened("order 7"), Kind.DUPLICATE, 0),
    (exactly.NOT_HAPPENED, Kind.DONE, 1),
    (exactly.CANT_TELL, Kind.IN_FLIGHT, 0),
])
def test_the_observer_settles_unknown_before_any_retry(store, uid, verdict, expect, sends):
    lease = store.claim(f"obs-{uid}", ttl="1m")
    facts = dict(action="send", target=f"t-{uid}")
    first = lease.effect(**facts).run(lambda k: (_ for _ in ()).throw(TimeoutError("lost")))
    assert first.outcome == Kind.UNKNOWN
    calls = []
    out = lease.effect(**facts, observe=lambda k: verdict).run(lambda k: calls.append(k) or "ok")
    assert out.outcome == expect and len(calls) == sends
    if isinstance(verdict, exactly.Happened):
        assert out.response == "order 7"
    lease.release()


def test_not_sent_releases_the_reservation(store, uid):
    lease = store.claim(f"ns-{uid}", ttl="1m")
    eff = lease.effect(action="send", target=f"t-{uid}")

    def refuse(key):
        raise exactly.NotSent("the far side refused the connection")

    out = eff.run(refuse)
    assert out.outcome == Kind.NOT_SENT and out.exit_code == 75
    assert "refused" in out.reason
    assert eff.run(lambda k: "sent").outcome == Kind.DONE
    lease.release()


def test_an_observer_that_raises_cannot_tell(store, uid):
    lease = store.claim(f"obsraise-{uid}", ttl="1m")
    facts = dict(action="send", target=f"t-{uid}")
    lease.effect(**facts).run(lambda k: 1 / 0)

    def broken(key):
        raise RuntimeError("far side down")

    out = lease.effect(**facts, observe=broken).run(lambda k: "x")
    assert out.outcome == Kind.IN_FLIGHT and "far side down" in out.reason
    lease.release()


def test_keyboard_interrupt_is_recorded_then_raised(store, uid):
    lease = store.claim(f"kbd-{uid}", ttl="1m")
    eff = lease.effect(action="send", target=f"t-{uid}")

    def interrupted(key):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        eff.run(interrupted)
    assert store.get(eff.key)["state"] == "unknown"
    lease.release()


def test_a_second_worker_sees_the_send_in_flight(db, store, uid):
    """Two workers (two connections) on one effect: while the first sends, the second does not."""
    lease = store.claim(f"fly-{uid}", ttl="1m")
    facts = dict(action="send", target=f"t-{uid}")
    started, finish = threading.Event(), threading.Event()
    result = {}

    def slow(key):
        started.set()
        finish.wait(10)
        return "sent once"

    t = threading.Thread(target=lambda: result.setdefault("a", lease.effect(**facts).run(slow)))
    t.start()
    assert started.wait(10)
    other = exactly.open(db)
    calls = []
    out = other.effect(lease.job, lease.token, **facts).run(lambda k: calls.append(k))
    assert out.outcome == Kind.IN_FLIGHT and calls == []
    finish.set()
    t.join(10)
    assert result["a"].outcome == Kind.DONE
    other.close()
    lease.release()


def test_the_gil_is_released_while_the_database_waits(store, uid):
    """A call waiting for the connection a perform holds must not hold the GIL: if it did, the
    perform could never take the GIL back to return, and both would hang."""
    lease = store.claim(f"gil-{uid}", ttl="1m")
    in_perform = threading.Event()
    done = {}

    def perform(key):
        in_perform.set()
        time.sleep(0.3)
        return "ok"

    t = threading.Thread(
        target=lambda: done.setdefault("out", lease.effect(action="a", target=uid).run(perform)))
    t.start()
    assert in_perform.wait(10)
    ticks = []
    ticker = threading.Thread(target=lambda: [ticks.append(time.sleep(0.01)) for _ in range(20)])
    ticker.start()
    snap = store.status()  # waits for the connection, GIL released
    ticker.join(10)
    t.join(10)
    assert not t.is_alive() and done["out"].outcome == Kind.DONE
    assert len(ticks) == 20 and "totals" in snap
    lease.release()


def test_the_lease_renews_in_its_block_and_is_released_at_exit(db, store, uid):
    job = f"renew-{uid}"
    other = exactly.open(db)
    # 2 s: renewed every 0.67 s, so a loaded machine that delays a renewal or two does not
    # leave the effect below under a lease about to end.
    with store.claim(job, ttl="2s") as lease:
        for _ in range(7):  # 3.5 s: one and three quarter leases long
            time.sleep(0.5)
            assert other.claim(job, ttl="1s") is None, "the renewed lease must still hold"
        assert not lease.lost
        out = lease.effect(action="late", target=uid).run(lambda k: "still ours")
        assert out.outcome == Kind.DONE
    after = other.claim(job, ttl="1s")
    assert after is not None and after.token > lease.token, "released at the block's end"
    after.release()
    other.close()


def test_the_lease_without_renewal_runs_out(db, store, uid):
    job = f"norenew-{uid}"
    lease = store.claim(job, ttl="300ms", renew=False)
    with lease:
        time.sleep(2.8)  # the lease and the 2 s clock-skew margin
        other = exactly.open(db)
        taken = other.claim(job, ttl="1m")
        assert taken is not None
        out = lease.effect(action="late", target=uid).run(lambda k: "too late")
        assert out.outcome == Kind.FENCED
    taken.release()
    other.close()


def test_approval_is_consumed_once_across_python_and_the_cli(store, cli, uid):
    job = f"appr-{uid}"
    lease = store.claim(job, ttl="1m")
    facts = dict(action="pay", target=f"vendor-{uid}", inputs={"amount": "90.00"},
                 terms="Pay vendor 90.00 EUR", needs_approval=True)
    sent = []
    out = lease.effect(**facts).run(lambda k: sent.append(k) or "paid")
    assert out.outcome == Kind.AWAITING_APPROVAL and out.exit_code == 4 and sent == []
    pending = [p for p in store.status()["pending_approvals"] if p["effect_key"] == out.key]
    assert pending and pending[0]["terms_shown"] == "Pay vendor 90.00 EUR"
    r = cli("approve", out.key, "--note", "ok by cfo")
    assert r.returncode == 0, r.stderr
    again = store.approve(out.key)
    assert not again.applied and "already approved" in again.message
    done = lease.effect(**facts).run(lambda k: sent.append(k) or "paid")
    assert done.outcome == Kind.DONE and len(sent) == 1
    # The CLI's retry of the same facts is the same effect: suppressed, its command not run.
    r = cli("effect", "--job", job, "--token", str(lease.token), "--action", "pay",
            "--target", f"vendor-{uid}", "--input", "amount=90.00", "--needs-approval",
            "--", "sh", "-c", "echo SENT-BY-CLI")
    assert r.returncode == 0 and "SENT-BY-CLI" not in r.stdout, r
    assert "duplicate suppressed" in r.stderr
    assert not store.approve(out.key).applied, "consumed: a second approval does nothing"
    lease.release()


def test_deny_cancels(store, uid):
    lease = store.claim(f"deny-{uid}", ttl="1m")
    eff = lease.effect(action="pay", target=uid, terms="Pay 5", needs_approval=True)
    assert eff.run(lambda k: "x").outcome == Kind.AWAITING_APPROVAL
    assert store.deny(eff.key, note="no").applied
    out = eff.run(lambda k: "x")
    assert out.outcome == Kind.CANCELLED and out.exit_code == 7
    lease.release()


def test_a_python_unknown_is_settled_by_the_clis_observer(store, cli, uid):
    job = f"interop-{uid}"
    lease = store.claim(job, ttl="1m")
    eff = lease.effect(action="send", target=uid)
    assert eff.run(lambda k: 1 / 0).outcome == Kind.UNKNOWN
    r = cli("effect", "--job", job, "--token", str(lease.token), "--action", "send",
            "--target", uid, "--observe", "true", "--", "sh", "-c", "echo SENT-AGAIN")
    assert r.returncode == 0 and "SENT-AGAIN" not in r.stdout, r
    row = store.get(eff.key)
    assert row["state"] == "done"
    lease.release()


def test_resolve_by_a_person(store, cli, uid):
    lease = store.claim(f"res-{uid}", ttl="1m")
    eff = lease.effect(action="send", target=uid)
    assert eff.run(lambda k: 1 / 0).outcome == Kind.UNKNOWN
    d = store.resolve(eff.key, exactly.Resolution.NOT_HAPPENED, note="checked the far side")
    assert d.applied, d.message
    assert eff.run(lambda k: "sent after resolution").outcome == Kind.DONE
    assert not store.resolve(eff.key, "happened").applied
    with pytest.raises(ValueError):
        store.resolve(eff.key, "maybe")
    lease.release()


def test_status_shows_python_effects(db, store, cli, uid):
    lease = store.claim(f"stat-{uid}", ttl="1m")
    eff = lease.effect(action="send", target=uid)
    eff.run(lambda k: 1 / 0)
    snap = store.status()
    assert any(u["effect_key"] == eff.key for u in snap["unknown"])
    r = cli("status", "--json")
    assert r.returncode == 0, r.stderr
    assert any(u["effect_key"] == eff.key for u in json.loads(r.stdout)["unknown"])
    lease.release()


def test_bad_input_is_a_clear_error(store):
    with pytest.raises(exactly.UsageError):
        store.claim("job\x1b[31m", ttl="1m")
    with pytest.raises(exactly.UsageError):
        store.claim("ok", ttl="50ms")
    with pytest.raises(exactly.UsageError):
        store.claim("ok", ttl="soon")


def test_a_foreign_file_is_a_store_error(tmp_path):
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not a database, just text " * 100)
    with pytest.raises(exactly.StoreError):
        exactly.open(str(bad))


def test_open_without_a_path_follows_exactly_db(tmp_path, monkeypatch, uid):
    path = tmp_path / "from-env.db"
    monkeypatch.setenv("EXACTLY_DB", str(path))
    s = exactly.open()
    assert s.path == str(path)
    lease = s.claim(f"env-{uid}", ttl="1m")
    assert lease is not None and path.exists()
    lease.release()
    s.close()
