"""A small web app the preview tests run inside sandboxes (standard library only).

    python3 app.py PORT [BIND]      # BIND defaults to 0.0.0.0; 127.0.0.1 tests loopback apps

Routes: `/` a page that loads `/app.js` and `/pixel.png` and opens a WebSocket to
`/ws` (an echo server); `/headers` the request headers as JSON; `/slow` a chunked
answer whose second chunk waits until /tmp/release exists; `/big?n=` n bytes.
"""

import base64
import hashlib
import json
import os
import struct
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b"""<!doctype html><html><head><title>preview app</title><script src="/app.js"></script></head>
<body><h1>Hello from the sandbox</h1><img id="pixel" src="/pixel.png" onload="window.imageLoaded = true"></body></html>"""

SCRIPT = b"""window.scriptRan = true;
window.echoes = [];
const socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
socket.onopen = () => socket.send("hello over the router");
socket.onmessage = (event) => window.echoes.push(event.data);
socket.onerror = () => { window.socketError = true; };
"""

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        pass

    def _send(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        self._send(200, json.dumps({"received": len(body)}).encode(), "application/json")

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/":
            self._send(200, PAGE, "text/html")
        elif path == "/app.js":
            self._send(200, SCRIPT, "application/javascript")
        elif path == "/pixel.png":
            self._send(200, PIXEL, "image/png")
        elif path == "/headers":
            headers = {"path": self.path, "headers": [[k, v] for k, v in self.headers.items()]}
            self._send(200, json.dumps(headers).encode(), "application/json")
        elif path == "/big":
            n = int(self.path.split("n=")[1])
            self._send(200, b"x" * n, "application/octet-stream")
        elif path == "/slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(b"first\n")
            deadline = time.time() + 30
            while not os.path.exists("/tmp/release") and time.time() < deadline:
                time.sleep(0.02)
            self._chunk(b"second\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        elif path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            self._websocket()
        else:
            self._send(404, b"not found", "text/plain")

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _websocket(self):
        accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        while True:
            header = self.rfile.read(2)
            if len(header) < 2:
                return
            opcode, length = header[0] & 0x0F, header[1] & 0x7F
            if length == 126:
                length = struct.unpack(">H", self.rfile.read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if header[1] & 0x80 else b"\0\0\0\0"
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(length)))
            if opcode == 8:  # close
                self.wfile.write(b"\x88\x00")
                self.wfile.flush()
                return
            if opcode == 1:
                reply = b"echo: " + payload
                prefix = bytes([0x81, len(reply)]) if len(reply) < 126 else bytes([0x81, 126]) + struct.pack(">H", len(reply))
                self.wfile.write(prefix + reply)
                self.wfile.flush()


if __name__ == "__main__":
    port = int(sys.argv[1])
    bind = sys.argv[2] if len(sys.argv) > 2 else "0.0.0.0"
    ThreadingHTTPServer.request_queue_size = 128
    ThreadingHTTPServer((bind, port), Handler).serve_forever()
