"""Python workers SIGKILLed at each point of an effect, restarted on the same ledger: the far
side gets each message exactly once, and every effect left open is settled by its observer.

Points: `after_claim` (reserved, nothing sent), `after_submitted` (before the request),
`mid_send` (the request left, no answer), `after_send` (the answer in hand, not recorded),
`after_done` (recorded), `random` (an outside SIGKILL at a random moment).
EXACTLY_PY_KILL_ROUNDS sets the rounds per point (default 50: 300 kills)."""
import concurrent.futures
import os
import random
import signal
import subprocess
import sys
import time
import uuid

import exactly

HERE = os.path.dirname(os.path.abspath(__file__))
POINTS = ["after_claim", "after_submitted", "mid_send", "after_send", "after_done", "random"]


def worker(db, job, target, far, point, env):
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "kill_worker.py"), db, job, target, far, point],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def one_round(db, far, point, i, guard_off, tag):
    job, target = f"kill-{tag}-{point}-{i}", f"customer-{tag}-{point}-{i}"
    env = dict(os.environ, EXACTLY_MAX_SKEW="200ms")
    first_env = dict(env)
    if guard_off:
        env["EXACTLY_PY_GUARD_OFF"] = "1"  # the restart retries without the ledger
    if point not in ("mid_send", "random"):
        first_env["EXACTLY_FAULT"] = f"{point}:kill"
    p = worker(db, job, target, far, point, first_env)
    if point == "random":
        time.sleep(random.uniform(0.0, 0.25))
        p.send_signal(signal.SIGKILL)
    out, err = p.communicate(timeout=60)
    killed = p.returncode == -signal.SIGKILL
    assert killed or point == "random", f"{point}: the worker was not killed: {p.returncode} {out} {err}"
    again = worker(db, job, target, far, "none", env)
    out2, err2 = again.communicate(timeout=60)
    assert again.returncode == 0, f"{point}: the restart did not end done: {out2} {err2}"
    return exactly.key("send-message", target, {"text": "hello"}), killed


def run_kills(db, far, rounds, guard_off=False):
    keys, kills, tag = [], 0, uuid.uuid4().hex[:8]
    with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
        futures = [pool.submit(one_round, db, far, p, i, guard_off, tag)
                   for i in range(rounds) for p in POINTS]
        for f in futures:
            k, killed = f.result()
            keys.append(k)
            kills += killed
    sends = {}
    for name in os.listdir(far):
        k = name.split(".")[0]
        sends[k] = sends.get(k, 0) + 1
    return keys, kills, sends


def kill_and_count(db, tmp_path, rounds, label):
    far = tmp_path / "far-side"
    far.mkdir()
    keys, kills, sends = run_kills(db, str(far), rounds)
    store = exactly.open(db)
    duplicates = sum(n - 1 for n in sends.values() if n > 1)
    lost = [k for k in keys if sends.get(k, 0) == 0]
    open_rows = [k for k in keys if store.get(k)["state"] != "done"]
    print(f"{label}: {len(keys)} effects, {kills} SIGKILLs, {duplicates} duplicates, "
          f"{len(lost)} lost, {len(open_rows)} left open")
    assert kills >= len(keys) * 5 // 6, "nearly every round must kill its worker"
    assert duplicates == 0
    assert lost == []
    assert open_rows == [], "every unknown is settled by its observer"


def test_sigkilled_python_workers_send_each_message_once(db, tmp_path):
    rounds = int(os.environ.get("EXACTLY_PY_KILL_ROUNDS", "50"))
    kill_and_count(db, tmp_path, rounds, "python kill test")


def test_sigkilled_with_form_workers_send_each_message_once(db, tmp_path, monkeypatch):
    """The same kills on workers that send from a `with` block: the same step machine."""
    monkeypatch.setenv("EXACTLY_PY_FORM", "with")
    rounds = int(os.environ.get("EXACTLY_PY_KILL_ROUNDS_WITH", "10"))
    kill_and_count(db, tmp_path, rounds, "python kill test, with form")


def test_the_kill_test_finds_duplicates_without_the_guard(db, tmp_path):
    """The same rounds with the restart sending as a plain retry would: the far side gets
    messages twice, so the test above can fail."""
    far = tmp_path / "far-side"
    far.mkdir()
    keys, kills, sends = run_kills(db, str(far), 2, guard_off=True)
    duplicates = sum(n - 1 for n in sends.values() if n > 1)
    print(f"guard off: {len(keys)} effects, {kills} SIGKILLs, {duplicates} duplicates")
    assert duplicates >= 4, "mid_send, after_send and after_done each send twice"
