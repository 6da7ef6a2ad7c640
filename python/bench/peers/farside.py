"""The far side every peer charges: a payment service that does NOT dedupe (each POST is one more
charge), and the faults run_peers.py injects on the caller's side. Shared by every peer file,
outside the lines count_lines.py counts: it stands for the payment provider's client.

PEER_FAULT (in the worker's environment):
  kill_after_send  the request reached the far side; print "sent" and wait to be SIGKILLed
  lose_answer      the request reached the far side; raise as a timeout reading the answer would
  slow             the request takes 1 s to reach the far side (two workers overlap meanwhile)
"""
from __future__ import annotations

import os
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Tuple



def _url() -> str:
    return os.environ.get("FAR_SIDE_URL", "http://127.0.0.1:8099")


class AnswerLost(ConnectionError):
    """The charge reached the far side; its answer did not come back."""


def charge(key: str, order: str, cents: int) -> str:
    """POSTs one charge with `key` as its idempotency key (which this far side ignores)."""
    q = urllib.parse.urlencode({"key": key, "order": order, "cents": cents})
    fault = os.environ.get("PEER_FAULT")
    if fault == "slow":
        time.sleep(1.0)
    with urllib.request.urlopen(urllib.request.Request(f"{_url()}/charge?{q}", method="POST")) as r:
        answer = r.read().decode()
    if fault == "kill_after_send":
        print("sent", flush=True)
        time.sleep(3600)
    if fault == "lose_answer":
        raise AnswerLost(f"charge {key}: the connection dropped before the answer")
    return answer


def charged(key: str) -> int:
    """How many charges the far side holds for `key`: what an observer asks."""
    with urllib.request.urlopen(f"{_url()}/charges?{urllib.parse.urlencode({'key': key})}") as r:
        return int(r.read())


class _Counts(BaseHTTPRequestHandler):
    charges: Dict[str, int] = {}
    lock = threading.Lock()

    def _key(self) -> str:
        return urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["key"][0]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        key = self._key()
        with self.lock:
            self.charges[key] = self.charges.get(key, 0) + 1
            n = self.charges[key]
        self._answer(f"charged {key} ({n})")

    def do_GET(self) -> None:  # noqa: N802
        with self.lock:
            self._answer(str(self.charges.get(self._key(), 0)))

    def _answer(self, text: str) -> None:
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: Any) -> None:
        pass


def serve() -> Tuple[ThreadingHTTPServer, str, Dict[str, int]]:
    """Starts the far side on a free port in a thread: (server, its URL, its charges by key)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counts)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}", _Counts.charges
