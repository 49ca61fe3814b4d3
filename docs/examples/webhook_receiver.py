#!/usr/bin/env python3
"""A Sluice webhook receiver using only the Python standard library.

It verifies X-Service-Signature over the raw body bytes in constant time, answers 2xx quickly,
and processes each delivery id once (retries and redeliveries repeat the id).

    SLUICE_WEBHOOK_SECRET=<32 hex> python3 webhook_receiver.py --port 9000

Every accepted event is printed as one JSON line on stdout.
"""
import argparse
import hashlib
import hmac
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

SECRET = os.environ.get("SLUICE_WEBHOOK_SECRET", "").encode()
seen_ids = set()  # use a database table with a unique key in production
seen_lock = Lock()


def valid_signature(body: bytes, header: str) -> bool:
    expected = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    # Constant-time comparison: never `==` on signatures.
    return hmac.compare_digest(expected, header)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)  # the exact bytes that were signed
        if not valid_signature(body, self.headers.get("X-Service-Signature", "")):
            self.send_response(401)
            self.end_headers()
            return
        delivery_id = self.headers.get("X-Service-Delivery", "")
        with seen_lock:
            duplicate = delivery_id in seen_ids
            seen_ids.add(delivery_id)
        if not duplicate:
            event = json.loads(body)
            # Hand the event to your own queue here; answer within 10 seconds.
            print(json.dumps({"id": event["id"], "event": event["event"], "data": event["data"]}), flush=True)
        self.send_response(204)  # a duplicate is acknowledged too, so it is not sent again
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    if len(SECRET) != 32:
        sys.exit("set SLUICE_WEBHOOK_SECRET to the webhook's 32-character secret")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
