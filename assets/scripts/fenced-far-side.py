#!/usr/bin/env python3
"""A far side you own that makes exactly-once hold where the sender cannot: it dedupes by the
Idempotency-Key (a repeated key gets the stored answer, nothing is done twice) and fences by the
Fencing-Token "JOB/N" (a token lower than the highest seen for the job is refused with 409).
Usage: fenced-far-side.py LOG [PORT]; prints the port it listens on; appends each transfer it
performs to LOG. Like a payment API, it takes only a JSON body (415 otherwise: nothing done). A
sketch of the rule, not a payment service."""
import http.server
import sys
import threading

LOG = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lock = threading.Lock()
answers = {}   # idempotency key -> the answer given
highest = {}   # job -> highest fencing token seen


class FarSide(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = self.headers.get("Content-Type", "")
        if kind.split(";")[0].strip() != "application/json":
            return self.answer(415, "not JSON: Content-Type %s\n" % (kind or "missing"))
        key = self.headers.get("Idempotency-Key", "")
        job, _, token = self.headers.get("Fencing-Token", "/0").rpartition("/")
        with lock:
            if int(token or 0) < highest.get(job, 0):
                return self.answer(409, "stale fencing token %s for %s\n" % (token, job))
            highest[job] = max(highest.get(job, 0), int(token or 0))
            if key in answers:
                return self.answer(200, answers[key])
            with open(LOG, "a") as log:
                log.write("%s %s %s\n" % (key, token, body.decode(errors="replace")))
            answers[key] = "transfer %d\n" % len(answers)
            return self.answer(201, answers[key])

    def answer(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), FarSide)
print(server.server_address[1], flush=True)
server.serve_forever()
