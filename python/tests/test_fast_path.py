"""Issue 35's one native call: an effect's facts are put in the library's terms once, when the
effect is made (plain inputs converted natively, any other through Python's check), its key
derived once and handed back, and `run` is begin, perform and finish in one call. The keys,
refusals and records are the ones the Python path made."""
import json
import os
import traceback
from collections import OrderedDict
from types import MappingProxyType

import pytest

import exactly
from exactly import Kind

PLAIN = [
    {},
    {"month": "2026-11"},
    {"zero": 0, "neg": -1, "i64": 2**63 - 1, "u64": 2**63, "max": 2**64 - 1, "min": -2**63},
    {"yes": True, "no": False, "none": None, "one": 1},
    {"list": [1, "a", None, [True, {"x": []}]], "tuple": (1, (2, "3")), "map": {"b": {"c": {}}}},
    {"text": "grüße\nzweite zeile \u00e9\U0001f600", "empty": "", "a=b": "c"},
]


@pytest.mark.parametrize("inputs", PLAIN, ids=range(len(PLAIN)))
def test_plain_inputs_are_keyed_as_exactly_key_does(cli, inputs):
    r = cli("key", "--action", "pay", "--target", "t", "--input-json", "-",
            input=json.dumps(inputs))
    assert r.returncode == 0, r.stderr
    want = r.stdout.strip()
    assert exactly.key("pay", "t", inputs) == want
    # The same facts through Python's check (not a plain dict): the same key.
    assert exactly.key("pay", "t", MappingProxyType(inputs)) == want
    assert exactly.key("pay", "t", OrderedDict(inputs)) == want


def test_inputs_that_are_not_plain_are_keyed_as_exactly_key_does(cli):
    inputs = {"f": 1.5, "e": 1e16, "tenth": 0.1, "nested": OrderedDict(a=2.0), "t": [0.5]}
    r = cli("key", "--action", "pay", "--target", "t", "--input-json", "-",
            input=json.dumps(inputs))
    assert r.returncode == 0, r.stderr
    assert exactly.key("pay", "t", inputs) == r.stdout.strip()


def test_the_key_is_derived_once_and_is_the_one_recorded(store, uid):
    lease = store.claim(f"once-{uid}", ttl="1m", renew=False)
    inputs = {"n": "1", "m": 2}
    eff = lease.effect(action="send", target=uid, inputs=inputs)
    inputs["n"] = "2"  # the effect keeps the facts it was made with
    before = eff.key
    out = eff.run(lambda k: k)
    assert before == out.key == eff.key == out.response
    assert out.key == exactly.key("send", uid, {"n": "1", "m": 2})
    assert store.get(out.key)["state"] == "done"
    # The with form hands the same key back from its own first attempt.
    with store.effect(lease.job, lease.token, action="send", target=f"{uid}-w",
                      inputs={"n": "1"}) as e:
        e.result = e.key
    assert e.key == e.outcome.key == e.outcome.response == exactly.key("send", f"{uid}-w",
                                                                      {"n": "1"})
    lease.release()


@pytest.mark.parametrize("facts, words", [
    (dict(action="pay", target="t", inputs={"n": float("nan")}), "input n: nan is not a finite"),
    (dict(action="pay", target="t", inputs={1: "a"}), "input name 1 is an int, not a string"),
    (dict(action="pay", target="t", inputs={"n": {1, 2}}), "input n: a set is not a JSON value"),
    (dict(action="pay", target="t", inputs={"n": 2**64}), "input n: 18446744073709551616 is"),
    (dict(action="pay", target=42), "target must be a string, not int 42"),
    (dict(action=None, target="t"), "action must be a string, not NoneType"),
    (dict(action="a|b", target="t"), "would make effect keys ambiguous"),
    (dict(action="pay", target=""), "the target is empty"),
    (dict(action="pay", target="t", inputs={"": "x"}), "an input has an empty key"),
])
def test_bad_facts_are_refused_when_the_effect_is_made(store, uid, facts, words):
    lease = store.claim(f"refuse-{uid}", ttl="1m", renew=False)
    with pytest.raises(exactly.UsageError) as e:
        lease.effect(**facts)
    assert words in str(e.value)
    with pytest.raises(exactly.UsageError):
        store.effect(lease.job, lease.token, **facts)
    lease.release()


def test_a_keyboard_interrupt_keeps_its_traceback(store, uid):
    lease = store.claim(f"tb-{uid}", ttl="1m", renew=False)
    eff = lease.effect(action="send", target=uid)

    def interrupted_in_perform(key):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as e:
        eff.run(interrupted_in_perform)
    frames = [f.name for f in traceback.extract_tb(e.value.__traceback__)]
    assert "interrupted_in_perform" in frames, frames
    assert store.get(eff.key)["state"] == "unknown"
    lease.release()


def test_an_outcome_is_an_outcome(store, uid):
    lease = store.claim(f"value-{uid}", ttl="1m", renew=False)
    out = lease.effect(action="send", target=uid).run(lambda k: "ok")
    assert isinstance(out, exactly.Outcome) and out.outcome is Kind.DONE and out.done
    assert out == exactly.Outcome(outcome=Kind.DONE, key=out.key, response="ok")
    assert (out.reason, out.state, out.exit_code, out.error) == (None, None, 0, None)
    assert repr(out).startswith("Outcome(outcome=<Kind.DONE: 'done'>")
    lease.release()


def test_a_forked_child_records_its_own_run(db, store, uid):
    """A child forked after the parent made an effect under the same lease is another process:
    its effect's run names the child, not the parent."""
    lease = store.claim(f"fork-{uid}", ttl="1m", renew=False)
    mine = lease.effect(action="send", target=f"{uid}-parent").run(lambda k: "ok")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a store of its own (no connection crosses a fork)
        code = 1
        try:
            os.close(r)
            s = exactly.open(db)
            out = s.effect(lease.job, lease.token, action="send", target=f"{uid}-child").run(
                lambda k: "ok")
            os.write(w, json.dumps([out.key, os.getpid()]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, got
    key, child = json.loads(got)
    assert store.get(mine.key)["run_id"] == f"{lease.job}-{lease.token}-{os.getpid()}"
    assert store.get(key)["run_id"] == f"{lease.job}-{lease.token}-{child}"
    lease.release()
