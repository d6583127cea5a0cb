"""TLS over a trio stream, built for relaying: whole socket reads, one pass per chunk.

`trio.SSLStream` decrypts one TLS record (16 KiB) per `receive_some`, each behind a
lock, a checkpoint and a fresh bytes object. A download through the proxy is
decrypted from the upstream and encrypted again towards the instance, so that
per-record Python work, not the cipher, set the HTTPS ceiling (under 0.2x the direct
throughput). This stream puts everything the socket has into the `MemoryBIO`,
decrypts every record there in one loop into one buffer, and encrypts a whole chunk
with one `SSLObject.write`: Python runs per socket read, not per record.

It is simpler than trio's because the proxy never sends and receives on one
connection from two tasks at once (an exchange is a request, then its response); the
transport's own conflict detection would catch a misuse. EOF without close_notify is
taken as EOF (trio's `https_compatible`): HTTP framing says whether a body was whole.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import cast

import trio

RECEIVE_SIZE = 1048576
"""The most one socket read takes (the receive buffers rarely hold more)."""
PLAIN_SIZE = 1048576
"""The most one `receive_some` returns, when the caller names no limit."""


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
            data = self._decrypt(limit)
            if data is not None:
                if not waited:
                    await trio.lowlevel.checkpoint()
                return data
            if self._outgoing.pending:  # a key update's answer, say: it goes before we wait
                await self._flush()
            await self._fill()
            waited = True

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

    def _decrypt(self, limit: int) -> bytearray | None:
        """Every whole record's plaintext that is here (up to `limit`); None: nothing yet;
        empty: the peer closed."""
        # Plaintext is never longer than its ciphertext: the buffer is sized from what came.
        out = bytearray(max(1, min(limit, self._incoming.pending + self.ssl_object.pending())))
        view = memoryview(out)
        got = 0
        try:
            while got < len(out):
                # Into the buffer, the count back (typeshed says bytes: it is the buffer-less form).
                count = cast(int, self.ssl_object.read(len(out) - got, view[got:]))
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
        finally:
            view.release()
        del out[got:]
        return out

    async def _fill(self) -> None:
        data = await self.transport.receive_some(RECEIVE_SIZE)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await self.transport.send_all(self._outgoing.read())

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the TLS stream is closed")
