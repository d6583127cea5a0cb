"""A PostgreSQL client in the standard library alone (startup, SCRAM-SHA-256, one simple
query), for instances whose template has Python but no PostgreSQL client.

`python3 pg_wire_client.py URL SQL` prints the first column of the first row, or
`ERROR <message>` and exits 2; a connection that cannot be opened exits 3.
Tests copy this file's text into a sandbox (`SOURCE`).
"""

import base64
import hashlib
import hmac
import os
import socket
import struct
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse


def main(url: str, query: str) -> int:
    parts = urlparse(url)
    try:
        sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    except OSError as exc:
        print(f"NOCONNECT {exc}")
        return 3
    sock.settimeout(15)
    user, password, database = unquote(parts.username or ""), unquote(parts.password or ""), parts.path.lstrip("/")

    def send(tag: bytes, body: bytes) -> None:
        sock.sendall(tag + struct.pack("!I", len(body) + 4) + body)

    def recv_exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError("closed")
            data += chunk
        return data

    def message() -> tuple[bytes, bytes]:
        tag = recv_exact(1)
        (length,) = struct.unpack("!I", recv_exact(4))
        return tag, recv_exact(length - 4)

    params = b"user\x00" + user.encode() + b"\x00database\x00" + database.encode() + b"\x00\x00"
    send(b"", struct.pack("!I", 196608) + params)
    nonce = base64.b64encode(os.urandom(18)).decode()
    client_first_bare = f"n=,r={nonce}"
    auth_message = ""
    while True:
        tag, body = message()
        if tag == b"E":
            fields = dict((f[:1], f[1:]) for f in body.split(b"\x00") if f)
            print("ERROR " + fields.get(b"M", b"").decode())
            return 2
        if tag == b"R":
            (code,) = struct.unpack("!I", body[:4])
            if code == 10:
                first = ("n,," + client_first_bare).encode()
                send(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!I", len(first)) + first)
            elif code == 11:
                server_first = body[4:].decode()
                attrs = dict(item.split("=", 1) for item in server_first.split(","))
                salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
                client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
                stored = hashlib.sha256(client_key).digest()
                final_bare = f"c=biws,r={attrs['r']}"
                auth_message = f"{client_first_bare},{server_first},{final_bare}"
                signature = hmac.new(stored, auth_message.encode(), hashlib.sha256).digest()
                proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
                send(b"p", f"{final_bare},p={proof}".encode())
        elif tag == b"Z":
            break
    send(b"Q", query.encode() + b"\x00")
    value = None
    while True:
        tag, body = message()
        if tag == b"D" and value is None:
            (length,) = struct.unpack("!i", body[2:6])
            value = body[6:6 + length].decode() if length >= 0 else "NULL"
        elif tag == b"E":
            fields = dict((f[:1], f[1:]) for f in body.split(b"\x00") if f)
            print("ERROR " + fields.get(b"M", b"").decode())
            return 2
        elif tag == b"Z":
            break
    print(value)
    return 0


SOURCE = Path(__file__).read_text() if "__file__" in globals() else ""

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
