#!/usr/bin/env python3
"""An Open Inference Protocol server that answers badly on purpose, for pillar's remote tests.

Usage: bad_upstream.py PORT. The model named in /v2/models/<name>/infer picks the misbehaviour:
  good         a valid reply (output "y", FP32, shape [rows, 2])
  malformed    200 with a body that is not JSON
  wrongshape   200 with output "y" of shape [rows, 3]
  wrongtype    200 with output "y" as INT64
  errorinside  200 whose body is an error
  huge         200 with a 2 MiB body
  drip         200 whose body arrives a byte every 100 ms
  reset        the connection shut down mid-reply
  notfound     404
Every request's Authorization header is appended to auth.log beside this script's working
directory, so a test can check what pillar sent.
"""
import json
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        with open("auth.log", "a") as log:
            log.write((self.headers.get("Authorization") or "-") + "\n")
        model = self.path.split("/")[3]
        rows = request["inputs"][0]["shape"][0]
        good = {"model_name": model, "model_version": "1",
                "outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 2],
                             "data": [0.5] * (rows * 2)}]}
        if model == "good":
            return self.reply(200, json.dumps(good).encode())
        if model == "malformed":
            return self.reply(200, b'{"outputs": [')
        if model == "wrongshape":
            good["outputs"][0]["shape"] = [rows, 3]
            good["outputs"][0]["data"] = [0.5] * (rows * 3)
            return self.reply(200, json.dumps(good).encode())
        if model == "wrongtype":
            good["outputs"][0]["datatype"] = "INT64"
            good["outputs"][0]["data"] = [1] * (rows * 2)
            return self.reply(200, json.dumps(good).encode())
        if model == "errorinside":
            return self.reply(200, b'{"error": "CUDA error: out of memory"}')
        if model == "huge":
            return self.reply(200, b" " * (2 << 20))
        if model == "drip":
            body = json.dumps(good).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for byte in body:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
            return
        if model == "reset":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"outputs"')
            self.wfile.flush()
            # The file objects share the socket, so close() would not end it: shut it down.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        return self.reply(404, b'{"error": "unknown model"}')


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()
