"""TLS over a trio stream, built for relaying: whole socket reads, one pass per chunk.

`trio.SSLStream` decrypts one TLS record (16 KiB) per `receive_some`, each behind a
lock, a checkpoint and a fresh bytes object. A download through the proxy is
decrypted from the upstream and encrypted again towards the instance, so that
per-record Python work, not the cipher, set the HTTPS ceiling (under 0.2x the direct
throughput). This stream puts everything the socket has into the `MemoryBIO`,
decrypts every record there in one loop into one buffer, and encrypts a whole chunk
with one `SSLObject.write`: Python runs per socket read, not per record.

A body relayed raw goes through `receive_into`: plaintext lands in the relay's one
buffer (no fresh, zeroed buffer per read), and ciphertext is read from the socket
into a reused per-thread buffer (`readv`, handed to the `MemoryBIO` before anything
else runs) rather than into a fresh bytes object per read; the copy into the BIO is
the one `ssl` cannot do without. Why not an `SSLSocket` on the raw socket: OpenSSL
then reads a record header and a record body per syscall (Python's `ssl` has no
read-ahead) and writes one record per syscall, 64 of each a MiB where this stream
makes one. Kernel TLS, which would let a body be spliced like plain HTTP, is out of
reach: Python's `ssl` (3.11) cannot turn it on, and this node's kernel has no `tls`
module.

It is simpler than trio's because the proxy never sends and receives on one
connection from two tasks at once (an exchange is a request, then its response); the
transport's own conflict detection would catch a misuse. EOF without close_notify is
taken as EOF (trio's `https_compatible`): HTTP framing says whether a body was whole.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
from typing import cast

import trio

from .streams import plain_socket

RECEIVE_SIZE = 1048576
"""The most one socket read takes (the receive buffers rarely hold more)."""
PLAIN_SIZE = 1048576
"""The most one `receive_some` returns, when the caller names no limit."""


class _Scratch(threading.local):
    """A socket read's landing place, one per thread: its bytes go into the `MemoryBIO`
    before anything else runs on the thread, so every stream can share it."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(RECEIVE_SIZE))


_SCRATCH = _Scratch()


class TLSStream(trio.abc.Stream):
    """The client or server side of TLS over `transport` (a socket, or a replayed prefix of one)."""

    def __init__(
        self,
        transport: trio.abc.Stream,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
    ) -> None:
        self.transport = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self._handshook = False
        self._closed = False

    # -- handshake ------------------------------------------------------------

    async def do_handshake(self) -> None:
        """Complete the handshake; a failure is `trio.BrokenResourceError` caused by the
        `ssl` error (its `verify_message` says why a certificate was refused)."""
        while True:
            try:
                self.ssl_object.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.CertificateError) as exc:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    await self._flush()  # the alert: the peer learns why
                raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from exc
            await self._flush()
            await self._fill()
        self._handshook = True
        await self._flush()

    # -- bytes ----------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned (ciphertext in the BIO, plaintext in OpenSSL)."""
        return self._incoming.pending + self.ssl_object.pending()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        limit = PLAIN_SIZE if max_bytes is None else max_bytes
        if limit < 1:
            raise ValueError("max_bytes must be >= 1")
        self._check_open()
        waited = False
        while True:
            # Plaintext is never longer than its ciphertext: the buffer is sized from what came.
            out = bytearray(max(1, min(limit, self.buffered)))
            got = self._decrypt_into(memoryview(out))
            if got is not None:
                if not waited:
                    await trio.lowlevel.checkpoint()
                del out[got:]
                return out
            waited = await self._wait_for_more() or waited

    async def receive_into(self, buffer: memoryview) -> int:
        """Plaintext into `buffer` (what is here, up to its length); 0: the peer closed.
        The relay's way: one buffer for a whole body, no fresh (zeroed) one per read."""
        if not len(buffer):
            raise ValueError("the buffer is empty")
        self._check_open()
        waited = False
        while True:
            got = self._decrypt_into(buffer)
            if got is not None:
                if not waited:
                    await trio.lowlevel.checkpoint()
                return got
            waited = await self._wait_for_more() or waited

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._check_open()
        if not data:
            await trio.lowlevel.checkpoint()
            return
        view = memoryview(data)
        while view:
            try:
                written = self.ssl_object.write(view)
            except ssl.SSLWantReadError:  # a renegotiation wants the peer's answer first
                await self._flush()
                await self._fill()
                continue
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS write failed: {exc}") from exc
            view = view[written:]
        await self._flush()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Send close_notify if it can go at once (without waiting for the peer's), then close."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if self._handshook:
                with contextlib.suppress(ssl.SSLError):
                    self.ssl_object.unwrap()
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                    await self._flush()
        finally:
            await self.transport.aclose()

    # -- inside ---------------------------------------------------------------

    def _decrypt_into(self, view: memoryview) -> int | None:
        """Every whole record's plaintext that is here, into `view`; None: nothing yet;
        0: the peer closed."""
        got = 0
        try:
            while got < len(view):
                # Into the buffer, the count back (typeshed says bytes: it is the buffer-less form).
                count = cast(int, self.ssl_object.read(len(view) - got, view[got:]))
                if not count:  # close_notify
                    break
                got += count
        except ssl.SSLWantReadError:
            if not got:
                return None
        except ssl.SSLEOFError:  # the transport ended without close_notify
            pass
        except ssl.SSLError as exc:
            if not got:
                raise trio.BrokenResourceError(f"TLS read failed: {exc}") from exc
            # What came before the bad record goes out; the error comes with the next read.
        return got

    async def _wait_for_more(self) -> bool:
        """More ciphertext from the transport (a pending answer goes first); whether it waited."""
        if self._outgoing.pending:  # a key update's answer, say: it goes before we wait
            await self._flush()
        return await self._fill()

    async def _fill(self) -> bool:
        """Read what the transport has into the `MemoryBIO` (its end: EOF there); whether it
        waited (a checkpoint) for it."""
        sock = plain_socket(self.transport)
        if sock is None:
            data = await self.transport.receive_some(RECEIVE_SIZE)
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()
            return True
        waited = False
        while True:
            try:
                # Into the shared scratch buffer, and on to the BIO with no await between.
                count = os.readv(sock.fileno(), (_SCRATCH.view,))
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(f"the connection failed: {exc}") from exc
            break
        if count:
            self._incoming.write(_SCRATCH.view[:count])
        else:
            self._incoming.write_eof()
        return waited

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await self.transport.send_all(self._outgoing.read())

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
