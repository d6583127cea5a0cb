"""One HTTP attempt of one delivery: resolve, check, connect to the checked address, POST.

The request goes to the address that passed the destination check (not to the name,
which httpx would resolve again): the URL names the address, while the `Host` header
and the TLS server name (SNI, and so certificate verification) stay the webhook's
host. Addresses are tried in resolver order until one accepts the connection.
Connections are not kept alive, since a pooled connection to one address could
otherwise be reused for another host name.

An attempt succeeds only on a 2xx answer. Redirects are not followed (a 3xx fails);
proxies from the environment are ignored; the whole attempt, resolution included,
has the webhook timeout (`Settings.webhook_timeout`, 30 s). At most 64 KiB of the answer is read.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import httpx
import trio

from corral.config import Settings

from .destinations import DestinationRefused, InvalidUrl, check_destination, parse_url

USER_AGENT = "Corral-Webhooks/1"
MAX_RESPONSE_BYTES = 64 * 1024
MAX_ERROR_LENGTH = 500


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to."""

    delivered: bool
    status_code: int | None
    duration_ms: int
    error: str | None


def ssl_context(ca_bundle: str | None, *, system: bool = True) -> ssl.SSLContext:
    """The system's trusted CAs plus those in `CORRAL_CA_BUNDLE` (PEM), when set."""
    context = ssl.create_default_context() if system else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_bundle:
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"CORRAL_CA_BUNDLE {ca_bundle}: {exc}") from exc
    return context


def _describe(error: BaseException) -> str:
    """`ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] ...`: httpx wraps the telling cause."""
    text = ""
    cause: BaseException | None = error
    for _ in range(5):
        if cause is None:
            break
        text = str(cause)
        if text and text != type(cause).__name__:
            break
        cause = cause.__cause__ or cause.__context__
    return f"{type(error).__name__}: {text or type(error).__name__}"[:MAX_ERROR_LENGTH]


class Sender:
    """Sends attempts with one httpx client (rebuilt if the CA bundle setting changes)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None
        self._client_ca: str | None = None
        self._lock = trio.Lock()
        # A bad CA bundle fails at start, not at the first delivery. The system store
        # (tens of milliseconds to load) is read when the first attempt is made.
        ssl_context(settings.ca_bundle, system=False)

    async def _client_for(self, ca_bundle: str | None) -> httpx.AsyncClient:
        async with self._lock:
            if self._client is None or self._client_ca != ca_bundle:
                context = await trio.to_thread.run_sync(ssl_context, ca_bundle)
                # An older client is left to attempts still using it; it keeps no connections.
                self._client = self._new_client(context)
                self._client_ca = ca_bundle
            return self._client

    def _new_client(self, context: ssl.SSLContext) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            verify=context,
            trust_env=False,
            follow_redirects=False,
            timeout=self.settings.webhook_timeout,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def send(self, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
        """POST `body` to `url` with `headers`; never raises for a failed attempt."""
        started = trio.current_time()

        def outcome(status: int | None, error: str | None) -> Outcome:
            elapsed = round((trio.current_time() - started) * 1000)
            ok = status is not None and 200 <= status < 300
            return Outcome(ok, status, elapsed, None if ok else error or f"HTTP {status}")

        timeout = self.settings.webhook_timeout
        with trio.move_on_after(timeout):
            try:
                target = parse_url(url)
                destination = await check_destination(
                    target, allow_private=self.settings.allow_private_destinations
                )
                status = await self._post(destination.addresses, target.host, target.host_header, target.port, target.path, body, headers)
            except InvalidUrl as exc:
                return outcome(None, f"invalid URL: {exc}")
            except DestinationRefused as exc:
                return outcome(None, f"destination refused: {exc}")
            except (httpx.HTTPError, ssl.SSLError, OSError, ValueError) as exc:
                return outcome(None, _describe(exc))
            return outcome(status, None)
        return outcome(None, f"no complete response within {timeout:g} s")

    async def _post(
        self,
        addresses: tuple[str, ...],
        host: str,
        host_header: str,
        port: int,
        path: str,
        body: bytes,
        headers: dict[str, str],
    ) -> int:
        client = await self._client_for(self.settings.ca_bundle)
        request_headers = {
            **headers,
            "Host": host_header,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        last_error: httpx.ConnectError | None = None
        for address in addresses:
            literal = f"[{address}]" if ":" in address else address
            request = client.build_request(
                "POST",
                f"https://{literal}:{port}{path}",
                content=body,
                headers=request_headers,
                extensions={"sni_hostname": host},
            )
            try:
                response = await client.send(request, stream=True)
            except httpx.ConnectError as exc:
                last_error = exc
                continue
            try:
                received = 0
                async for chunk in response.aiter_raw():
                    received += len(chunk)
                    if received >= MAX_RESPONSE_BYTES:
                        break
            finally:
                await response.aclose()
            return response.status_code
        assert last_error is not None
        raise last_error
