"""A stand-in chat service for the examples: it records every message it is sent and never
deduplicates (so a duplicate would show), and answers "did the message with this key arrive?".

    python3 chat_server.py [PORT]          # default 8765

POST /messages   JSON {"text": ...}, header Idempotency-Key → 201 {"id": n}
GET  /messages/KEY                                          → 200 {"id": n} | 404
GET  /messages                                              → 200 [every message]
POST /refunds    JSON {"order": ..., "amount": ...}, Idempotency-Key → 201 {"refund": n}
GET  /refunds/KEY                                           → 200 | 404
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple, Type


class Records:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: Dict[str, List[Dict[str, Any]]] = {"messages": [], "refunds": []}

    def add(self, kind: str, key: Optional[str], body: Dict[str, Any]) -> int:
        with self.lock:
            self.items[kind].append({"key": key, **body})
            return len(self.items[kind])

    def find(self, kind: str, key: str) -> List[Dict[str, Any]]:
        with self.lock:
            return [i for i in self.items[kind] if i["key"] == key]

    def all(self, kind: str) -> List[Dict[str, Any]]:
        with self.lock:
            return list(self.items[kind])


def handler_for(records: Records) -> Type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass

        def reply(self, code: int, value: Any) -> None:
            body = json.dumps(value).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            kind = self.path.strip("/")
            if kind not in ("messages", "refunds"):
                return self.reply(404, {"error": "no such collection"})
            size = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(size) or b"{}")
            n = records.add(kind, self.headers.get("Idempotency-Key"), body)
            self.reply(201, {"id": n})

        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) == 1 and parts[0] in ("messages", "refunds"):
                return self.reply(200, records.all(parts[0]))
            if len(parts) == 2 and parts[0] in ("messages", "refunds"):
                found = records.find(parts[0], parts[1])
                return self.reply(200, found[0]) if found else self.reply(404, {})
            self.reply(404, {})

    return Handler


def serve(port: int = 8765) -> Tuple[ThreadingHTTPServer, Records]:
    """Starts the server in a thread; returns (server, records)."""
    records = Records()
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(records))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, records


if __name__ == "__main__":
    server, _ = serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
    print(f"chat service on http://127.0.0.1:{server.server_address[1]}", flush=True)
    threading.Event().wait()
