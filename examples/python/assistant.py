"""A scheduled assistant's job, run by `exactly run assistant.toml`: it looks at something (the
chat's messages so far), then posts a digest through an HTTP call whose Idempotency-Key is the
effect key, with an observer that asks the chat service whether that message arrived.

The effect key comes from facts: the channel and the firing's slot (EXACTLY_SCHEDULED_AT), not
the run. A retry of the same firing, a restart, a second scheduler or a person's "run now" of
that slot is the same effect: posted once. A crash after the request left leaves it `unknown`;
the next run's observer settles it before anything is sent again.
"""
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any, Optional, Union

import exactly

CHAT = os.environ.get("ASSISTANT_CHAT_URL", "http://127.0.0.1:8765")
CHANNEL = os.environ.get("ASSISTANT_CHANNEL", "#ops")


def http(method: str, path: str, body: Any = None, key: Optional[str] = None) -> Any:
    req = urllib.request.Request(CHAT + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def already_posted(key: str) -> Union[exactly.Happened, exactly.Observation]:
    """The observer: HAPPENED if the chat has a message with this key, NOT_HAPPENED if not."""
    try:
        found = http("GET", f"/messages/{key}")
        return exactly.Happened(json.dumps(found))
    except urllib.error.HTTPError as e:
        return exactly.NOT_HAPPENED if e.code == 404 else exactly.CANT_TELL
    except OSError:
        return exactly.CANT_TELL


def main() -> int:
    store = exactly.open()  # EXACTLY_DB, set by `exactly run`
    # Under `exactly run` the scheduler holds the job's lease and renews it; run by hand, claim.
    lease = exactly.scheduled_lease(store) or store.claim("assistant", ttl="5m")
    if lease is None:
        print("another worker holds the assistant's lease", file=sys.stderr)
        return 0
    slot = os.environ.get("EXACTLY_SCHEDULED_AT", "by-hand")
    try:
        seen = len(http("GET", "/messages"))  # look at something first
    except OSError as e:
        print(f"the chat service is unreachable: {e}", file=sys.stderr)
        return 75
    text = f"digest for {slot}: {seen} messages so far"

    def post(key: str) -> Any:
        try:
            return http("POST", "/messages", {"text": text, "channel": CHANNEL}, key=key)
        except urllib.error.URLError as e:
            if isinstance(e.reason, ConnectionRefusedError):
                raise exactly.NotSent(f"the chat service refused the connection: {e}")
            raise  # it may have arrived: the effect becomes unknown, the observer decides later

    with lease:  # a lease we claimed renews and is released; the scheduler's is left to it
        out = lease.effect(action="post-digest", target=CHANNEL, inputs={"slot": slot},
                           terms=text, observe=already_posted).run(post)
    print(f"{out.outcome}: {out.key} {out.response or out.reason or ''}")
    return out.exit_code


if __name__ == "__main__":
    sys.exit(main())
