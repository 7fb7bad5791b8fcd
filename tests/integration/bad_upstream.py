#!/usr/bin/env python3
"""An Open Inference Protocol server that answers badly on purpose, for pillar's remote tests.

Usage: bad_upstream.py PORT [PORT...] (one server per port, the same behaviour; a port written
tls:PORT serves TLS with cert.pem and key.pem of the working directory, tls:PORT:NAME with
NAME.pem and NAME.key). The model named in
/v2/models/<name>/infer picks the misbehaviour:
  good         a valid reply (output "y", FP32, shape [rows, 2])
  malformed    200 with a body that is not JSON
  wrongshape   200 with output "y" of shape [rows, 3]
  wrongtype    200 with output "y" as INT64
  errorinside  200 whose body is an error
  errordenied  200 whose body is an error that names a codename a deny rule blocks
  errorcontrols  200 whose body is an error with terminal sequences in it
  huge         200 with a 2 MiB body
  drip         200 whose body arrives a byte every 100 ms
  reset        the connection shut down mid-reply
  notfound     404
  early        103 Early Hints, then a valid reply
  extra        a valid reply followed by a second, unasked-for one (data 999)
  late408      a valid reply, then, 200 ms later on the idle connection, 408 and a close
  strayahead   from the second request on a connection, an unasked reply (data 999, no id)
               before each answer: read as that request's answer unless pillar catches it
  strayaheadnoid  the same from a server that echoes no ids at all
  idlejunk     a valid reply, then, 100 ms later on the idle connection, bytes nobody asked for
  mixedid      echoes the request's id but on every other request (of all connections)
  crlfafter    a valid reply and one CRLF too many; the client port of each request goes to
               crlfafter.ports
  chunkext     a chunked reply whose first chunk header never ends
  echo         200 whose error repeats the request's Authorization header
  echocut      the same, padded so that an error cut at 256 bytes is cut inside the token
  prefixecho   200 whose error quotes the first half of the bearer token and its last four
               characters, as OpenAI-style servers quote a key they refuse
  hold         holds the request up to 3 s watching its connection, then answers; appends to
               hold.hits "closed S" (pillar closed it after S seconds) or "answered S"
  noid         a valid reply without the request's id
  wrongid      a valid reply carrying another request's id
  dropsecond   the second request on a connection is read and the connection closed unanswered
  read408      the second request on a connection is read, then answered 408 and a close (hits
               logged)
  closeidle    a valid reply, then, 100 ms later, the idle connection closed (hits logged)
  corkextra    a valid reply without an id, then a second one (data 999), sent together in one
               TCP segment (over TLS: two records that arrive together)
  pause        429 with Retry-After: 2
  busy503      503 without Retry-After (a failure, not a throttle)
  busy503zero  503 with Retry-After: 0 (the same)
  slowdown     500 after 300 ms (its hits are logged too)
  flaky        500
  broken       500
  maybeslow    a valid reply, 500 ms late while a file slow.<port> exists in the working directory
  bydata       by the request's first input value: 7, 500 after 200 ms; 8, a valid reply 4 s
               late; any other, a valid reply
  maybeshed    a valid reply, or while a file shed.<port> exists, 503 with X-Pillar-Shed: deadline
               and Retry-After: 3600 (an upstream claiming every deadline is too short)
Each request for pause, flaky or broken appends its time (time.time()) to <model>.hits.
GET /v2/health/ready answers 200, or 503 while a file unready.<port> exists in the working
directory (the active health checks' test).
Every request's Authorization and X-Pillar-Timeout-Ms headers are appended to auth.log and
timeout.log in the working directory, so a test can check what pillar sent.
"""
import json
import select
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mixed_served = 0

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def retry_after(self, status, seconds):
        """An empty reply of `status` with Retry-After: `seconds`."""
        self.send_response(status)
        self.send_header("Retry-After", seconds)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        if self.path != "/v2/health/ready":
            return self.reply(404, b'{"error": "not found"}')
        port = self.server.server_address[1]
        try:
            open("unready.%d" % port).close()
            return self.reply(503, b'{"error": "not ready"}')
        except OSError:
            return self.reply(200, b"")

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        with open("auth.log", "a") as log:
            log.write((self.headers.get("Authorization") or "-") + "\n")
        with open("timeout.log", "a") as log:
            log.write((self.headers.get("X-Pillar-Timeout-Ms") or "-") + "\n")
        model = self.path.split("/")[3]
        rows = request["inputs"][0]["shape"][0]
        good = {"model_name": model, "model_version": "1", "id": request.get("id", ""),
                "outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 2],
                             "data": [0.5] * (rows * 2)}]}
        if model == "slowdown":
            with open("slowdown.hits", "a") as hits:
                hits.write("%.6f\n" % time.time())
            time.sleep(0.3)
            return self.reply(500, b'{"error": "down"}')
        if model in ("pause", "flaky", "broken"):
            with open(model + ".hits", "a") as hits:
                hits.write("%.6f\n" % time.time())
            if model == "pause":
                return self.retry_after(429, "2")
            return self.reply(500, b'{"error": "flaky"}')
        if model == "busy503":
            return self.reply(503, b'{"error": "busy"}')
        if model == "busy503zero":
            return self.retry_after(503, "0")
        if model == "early":
            self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
            return self.reply(200, json.dumps(good).encode())
        if model == "corkextra":
            del good["id"]
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            self.reply(200, json.dumps(good).encode())
            good["outputs"][0]["data"] = [999] * (rows * 2)
            self.reply(200, json.dumps(good).encode())
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            return
        if model == "mixedid":
            # Echoes the id but on every other request (of all connections), from the second on.
            Handler.mixed_served += 1
            if Handler.mixed_served % 2 == 0:
                del good["id"]
            return self.reply(200, json.dumps(good).encode())
        if model == "idlejunk":
            # A valid reply, then, 100 ms later on the idle connection, bytes nobody asked for.
            self.reply(200, json.dumps(good).encode())
            self.wfile.flush()
            time.sleep(0.1)
            self.wfile.write(b"junk")
            self.wfile.flush()
            return
        if model == "crlfafter":
            # One line end too many after each reply; the port tells the connections apart.
            with open("crlfafter.ports", "a") as ports:
                ports.write("%d\n" % self.client_address[1])
            self.reply(200, json.dumps(good).encode())
            self.wfile.write(b"\r\n")
            return
        if model in ("strayahead", "strayaheadnoid"):
            # Out of step: from the second request on a connection, an unasked reply (999s, no
            # id) goes out first, then the answer (with the request's id, but for strayaheadnoid).
            if model == "strayaheadnoid":
                del good["id"]
            if getattr(self, "answered", False):
                stray = {"model_name": model, "model_version": "1",
                         "outputs": [{"name": "y", "datatype": "FP32", "shape": [rows, 2],
                                      "data": [999] * (rows * 2)}]}
                self.reply(200, json.dumps(stray).encode())
                self.wfile.flush()
            self.answered = True
            return self.reply(200, json.dumps(good).encode())
        if model == "extra":
            self.reply(200, json.dumps(good).encode())
            good["outputs"][0]["data"] = [999] * (rows * 2)
            return self.reply(200, json.dumps(good).encode())
        if model == "late408":
            self.reply(200, json.dumps(good).encode())
            self.wfile.flush()
            time.sleep(0.2)
            self.wfile.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if model == "chunkext":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                self.wfile.write(b"1;a=")
                for _ in range(64):  # 4 MiB of one chunk extension, then stop
                    self.wfile.write(b"x" * 65536)
            except OSError:
                pass
            self.close_connection = True
            return
        if model in ("echo", "echocut"):
            # echocut: an error cut at 256 bytes (as pillar's decoder once did) is cut inside the
            # token; pillar now quotes an error whole (up to 1 KiB) or not at all.
            padding = "x" * 188 if model == "echocut" else ""
            message = padding + "bad token " + (self.headers.get("Authorization") or "")
            return self.reply(200, json.dumps({"error": message}).encode())
        if model == "hold":
            start = time.time()
            while time.time() - start < 3:
                readable, _, _ = select.select([self.connection], [], [], 0.02)
                if not readable:
                    continue
                try:
                    closed = not self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    closed = True
                if closed:
                    with open("hold.hits", "a") as hits:
                        hits.write("closed %.3f\n" % (time.time() - start))
                    self.close_connection = True
                    return
            with open("hold.hits", "a") as hits:
                hits.write("answered %.3f\n" % (time.time() - start))
            return self.reply(200, json.dumps(good).encode())
        if model == "prefixecho":
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            message = ("Incorrect API key provided: " + token[:len(token) // 2] + "*****" +
                       token[-4:])
            return self.reply(200, json.dumps({"error": message}).encode())
        if model == "closeidle":
            with open("closeidle.hits", "a") as hits:
                hits.write("%.6f\n" % time.time())
            self.reply(200, json.dumps(good).encode())
            self.wfile.flush()
            time.sleep(0.1)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if model == "read408":
            # The second request on a connection is read whole, then answered 408.
            self.served = getattr(self, "served", 0) + 1
            with open("read408.hits", "a") as hits:
                hits.write("%.6f\n" % time.time())
            if self.served == 2:
                self.wfile.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                self.wfile.flush()
                self.close_connection = True
                return
            return self.reply(200, json.dumps(good).encode())
        if model == "dropsecond":
            # The second request on a connection is read, logged, and never answered.
            self.served = getattr(self, "served", 0) + 1
            with open("dropsecond.hits", "a") as hits:
                hits.write("%.6f\n" % time.time())
            if self.served == 2:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            return self.reply(200, json.dumps(good).encode())
        if model == "wrongid":
            good["id"] = "another-request"
            return self.reply(200, json.dumps(good).encode())
        if model == "noid":
            del good["id"]
            return self.reply(200, json.dumps(good).encode())
        if model == "maybeshed":
            try:
                open("shed.%d" % self.server.server_address[1]).close()
                self.send_response(503)
                self.send_header("X-Pillar-Shed", "deadline")
                self.send_header("Retry-After", "3600")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            except OSError:
                return self.reply(200, json.dumps(good).encode())
        if model == "bydata":
            first = request["inputs"][0]["data"][0]
            if first == 7:
                time.sleep(0.2)
                return self.reply(500, b'{"error": "seven"}')
            if first == 8:
                time.sleep(4)
            return self.reply(200, json.dumps(good).encode())
        if model == "maybeslow":
            try:
                open("slow.%d" % self.server.server_address[1]).close()
                time.sleep(0.5)
            except OSError:
                pass
            try:
                return self.reply(200, json.dumps(good).encode())
            except OSError:
                return  # a hedge won and pillar closed this connection
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
        if model == "errordenied":
            return self.reply(200, b'{"error": "we discussed project nightingale yesterday"}')
        if model == "errorcontrols":
            return self.reply(200, b'{"error": "bad \\u001b[2J\\u001b[Hthing"}')
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
    import threading
    ThreadingHTTPServer.request_queue_size = 128  # pillar opens many connections at once
    import ssl
    servers = []
    for port in sys.argv[1:]:
        number, _, name = port.removeprefix("tls:").partition(":")
        server = ThreadingHTTPServer(("127.0.0.1", int(number)), Handler)
        if port.startswith("tls:"):
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            if name:
                context.load_cert_chain(name + ".pem", name + ".key")
            else:
                context.load_cert_chain("cert.pem", "key.pem")
            server.socket = context.wrap_socket(server.socket, server_side=True)
        servers.append(server)
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
