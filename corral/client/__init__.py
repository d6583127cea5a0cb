"""The Python client of the Corral API: `Client` (blocking) and `AsyncClient` (trio or
asyncio), one typed method per operation (generated from the OpenAPI document by
`tools/gen_client.py`), errors as `CorralError`s, retries, SSE streams, files,
streamed exec, waiting for states and terminals. See docs/client.md."""

from ._base import DEFAULT_URL, AsyncEventStream, EventStream
from ._generated import OPERATIONS
from ._types import UNSET, Unset
from .client import AsyncClient, AsyncProcessRun, Client, OutputLine, ProcessRun, unwrap
from .config import Credentials, config_path, load_credentials, save_credentials
from .errors import (
    BadRequest,
    Conflict,
    CorralConnectionError,
    CorralError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ResourceFailed,
    ServerError,
    Unauthorized,
    Unprocessable,
    WaitTimeout,
)
from .retry import RetryPolicy
from .sse import Event, SSEParser
from .terminal import AsyncTerminal, Terminal, open_async_terminal

__all__ = [
    "DEFAULT_URL",
    "OPERATIONS",
    "UNSET",
    "AsyncClient",
    "AsyncEventStream",
    "AsyncProcessRun",
    "AsyncTerminal",
    "BadRequest",
    "Client",
    "Conflict",
    "CorralConnectionError",
    "CorralError",
    "Credentials",
    "Event",
    "EventStream",
    "Forbidden",
    "NotFound",
    "OutputLine",
    "PayloadTooLarge",
    "ProcessRun",
    "RateLimited",
    "ResourceFailed",
    "RetryPolicy",
    "SSEParser",
    "ServerError",
    "Terminal",
    "Unauthorized",
    "Unprocessable",
    "Unset",
    "WaitTimeout",
    "config_path",
    "load_credentials",
    "open_async_terminal",
    "save_credentials",
    "unwrap",
]
