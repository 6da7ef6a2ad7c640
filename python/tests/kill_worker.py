"""One worker of the kill test: claims the job's lease, sends one message to the far side (a
folder: each send is a new file, written and fsynced) with an observer that asks the far side,
and exits. The test SIGKILLs it at one point of the effect and starts it again.

argv: DB JOB TARGET FAR_SIDE_DIR POINT   (POINT "mid_send" kills inside perform, after the
request left; the library's own points come through EXACTLY_FAULT=POINT:kill).
EXACTLY_PY_GUARD_OFF=1 sends without the ledger, to show the test finds the duplicates;
EXACTLY_PY_FORM=with sends from a `with store.effect(…) as e:` block instead of run."""
import os
import signal
import sys
import time
import uuid

import exactly

db, job, target, far, point = sys.argv[1:6]


def sent_files(key):
    return [n for n in os.listdir(far) if n.startswith(key + ".")]


def send(key):
    if point == "random":
        time.sleep(0.002)
    path = os.path.join(far, f"{key}.{uuid.uuid4().hex}")
    with open(path, "w") as f:
        f.write(job)
        f.flush()
        os.fsync(f.fileno())
    if point == "mid_send":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"message {key} delivered"


def look(key):
    return exactly.Happened("seen at the far side") if sent_files(key) else exactly.NOT_HAPPENED


if os.environ.get("EXACTLY_PY_GUARD_OFF") == "1":
    # The guard switched off: the job as written before exactly, a retry that just sends.
    send(exactly.key("send-message", target, {"text": "hello"}))
    sys.exit(0)

store = exactly.open(db)
deadline = time.monotonic() + 60
# A lease too close to its end refuses the send (lease_ending): on a loaded box, claim again.
for _ in range(5):
    while (lease := store.claim(job, ttl="2s")) is None:
        if time.monotonic() > deadline:
            sys.exit("the lease was never free")
        time.sleep(0.05)
    with lease:
        eff = lease.effect(action="send-message", target=target, inputs={"text": "hello"},
                           observe=look)
        if os.environ.get("EXACTLY_PY_FORM") == "with":  # the block sends, not a callable
            with eff as e:
                if e.fresh:
                    e.result = send(e.key)
            out = e.outcome
        else:
            out = eff.run(send)
    if out.outcome != exactly.Kind.LEASE_ENDING:
        break
print(out.outcome.value, out.reason or "")
sys.exit(0 if out.done else 3)
