"""The node's log: text or one JSON object a line, each line tied to its request (contract §19).

`configure()` installs one handler on the root logger for `corral serve`: plain text by
default, JSON when `CORRAL_LOG_FORMAT=json`, at `CORRAL_LOG_LEVEL` (an explicit
`--log-level` option wins over the variable; `info` when neither is given). A filter on
that handler stamps every record written while a request is served (in its task or the
tasks it started: `corral.http.observe.current()`) with the request's id and tenant, so
an operator can go from any line to the request's access line and its trace.

`access_line` is the request observer that writes one `corral.access` line per API
request (the preview router writes its own to the same logger: `corral.net.preview.proxy`).
It logs the route template, never the path's query string, a header or a body: nothing
a tenant sends is copied into the log.

The node's handler (`NodeLogHandler`) writes to its own block-buffered copy of stderr:
a line below WARNING reaches the file at most `FLUSH_SECONDS` after it was written (a
daemon thread flushes), a warning or worse at once, and everything at exit
(`logging.shutdown`). Python's stderr flushes every line, and that one system call per
request was the largest part of what access lines cost (issue 29: under 5% in all).
A node killed with SIGKILL loses at most the last `FLUSH_SECONDS` of info lines.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

from corral.http.observe import RequestRecord, current

_json_string: Any = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.encode_basestring
"""A str as a JSON string literal, non-ASCII kept (what `json.dumps(..., ensure_ascii=False)` writes)."""

FORMATS = ("text", "json")
FLUSH_SECONDS = 0.1
"""How long an info or debug line may wait in the node handler's buffer."""
LEVELS = ("debug", "info", "warning", "error", "critical")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

access_log = logging.getLogger("corral.access")

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
"""LogRecord attributes every record has; anything else on a record came from `extra=`."""
_REQUEST_FIELDS = ("request_id", "tenant_id", "resource_ids")


class LogSettingsError(ValueError):
    """`CORRAL_LOG_FORMAT` or the log level names something that does not exist."""


def node_name(environ: Mapping[str, str] = os.environ) -> str:
    """`CORRAL_NODE_NAME`, else the host name: which node of several wrote a line."""
    return environ.get("CORRAL_NODE_NAME") or socket.gethostname()


def resource_ids(record: RequestRecord) -> dict[str, str]:
    """The ids in a request's path, named by its route template: `{id}` and `{..._id}`.

    Other placeholders (`{token}`, `{path}`, `{name}`) are left out: a token in a path
    must not reach the log.
    """
    if "{" not in record.route:
        return {}
    found: dict[str, str] = {}
    for template, value in zip(record.route.split("/"), record.path.split("/"), strict=False):
        if template.startswith("{") and template.endswith("}"):
            name = template[1:-1]
            if name == "id" or name.endswith("_id"):
                found[name] = value
    return found


class RequestFields(logging.Filter):
    """Adds `request_id`, `tenant_id` and `resource_ids` of the request being served (None
    outside one) to every record; fields a caller passed in `extra=` are kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            request = current()
            record.request_id = request.request_id if request is not None else None
            if not hasattr(record, "tenant_id"):
                record.tenant_id = request.tenant_id if request is not None else None
            if not hasattr(record, "resource_ids"):
                record.resource_ids = resource_ids(request) if request is not None else {}
        return True


class QuietClients(logging.Filter):
    """Drops the HTTP clients' own info and debug lines: httpx logs every request's full
    URL, and a webhook's or a token endpoint's URL may carry a secret."""

    NAMES = ("httpx", "httpcore")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(self.NAMES)


class TextFormatter(logging.Formatter):
    """The classic `time LEVEL logger: message`, with ` request_id=...` when there is one."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id = getattr(record, "request_id", None)
        if request_id:
            first, newline, rest = line.partition("\n")  # after the message, before a traceback
            line = f"{first} request_id={request_id}{newline}{rest}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, node, the
    request's fields, the caller's `extra=` fields, and `exception` when there is one."""

    def __init__(self, node: str | None = None) -> None:
        super().__init__()
        self.node = node or node_name()

    _second = -1
    _second_text = ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:  # one strftime a second, not one a line
            self._second, self._second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        line: dict[str, Any] = {
            "time": f"{self._second_text}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "node": self.node,
            "request_id": getattr(record, "request_id", None),
        }
        tenant_id = getattr(record, "tenant_id", None)
        if tenant_id:
            line["tenant_id"] = tenant_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in line and not key.startswith("_") and value not in (None, {}):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def chosen_level(option: str | None, environ: Mapping[str, str] = os.environ) -> int:
    """The `--log-level` option if given, else `CORRAL_LOG_LEVEL`, else info."""
    name = (option or environ.get("CORRAL_LOG_LEVEL") or "info").strip().lower()
    if name not in LEVELS:
        raise LogSettingsError(f"log level {name!r} is not one of {', '.join(LEVELS)}")
    return int(getattr(logging, name.upper()))


def chosen_format(environ: Mapping[str, str] = os.environ) -> str:
    name = (environ.get("CORRAL_LOG_FORMAT") or "text").strip().lower()
    if name not in FORMATS:
        raise LogSettingsError(f"CORRAL_LOG_FORMAT {name!r} is not one of {', '.join(FORMATS)}")
    return name


class NodeLogHandler(logging.StreamHandler):
    """A stream handler that flushes a warning or worse at once and other lines within
    `FLUSH_SECONDS` (a daemon thread), instead of a system call per line."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._dirty = False
        self._closed = threading.Event()
        threading.Thread(target=self._flush_now_and_then, name="corral-log-flush", daemon=True).start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write_line(self.format(record), urgent=record.levelno >= logging.WARNING)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def write_line(self, text: str, urgent: bool = False) -> None:
        """`text` and a newline, under the handler's lock (lines never interleave)."""
        self.acquire()
        try:
            self.stream.write(text + self.terminator)
            if urgent:
                self.stream.flush()
            self._dirty = not urgent
        finally:
            self.release()

    def flush(self) -> None:
        self._dirty = False
        super().flush()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError, ValueError):  # a stream already closed: nothing to write
            self.flush()
        super().close()

    def _flush_now_and_then(self) -> None:
        while not self._closed.wait(FLUSH_SECONDS):
            if self._dirty:
                try:
                    self.flush()
                except (OSError, ValueError):  # the stream is gone: nothing left to do
                    return


def buffered_stderr() -> IO[str]:
    """A block-buffered text stream on a copy of stderr's descriptor (stderr itself
    when it has none, as under a test's capture)."""
    try:
        descriptor = os.dup(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return sys.stderr
    return open(descriptor, "w", buffering=1 << 16, encoding="utf-8", errors="backslashreplace")


def make_handler(log_format: str, stream: IO[str] | None = None, node: str | None = None) -> logging.Handler:
    """The node's handler, with the request filter and the chosen formatter."""
    handler = NodeLogHandler(stream if stream is not None else buffered_stderr())
    handler.addFilter(QuietClients())
    handler.addFilter(RequestFields())
    handler.setFormatter(JsonFormatter(node) if log_format == "json" else TextFormatter())
    return handler


def configure(level_option: str | None = None, environ: Mapping[str, str] = os.environ, stream: IO[str] | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one of ours; raises `LogSettingsError`."""
    level = chosen_level(level_option, environ)
    handler = make_handler(chosen_format(environ), stream, node_name(environ))
    # Nothing a line shows needs the caller's frame, thread or process: looking them up
    # was a third of an access line's cost (issue 29: under 5% of a request in all).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, NodeLogHandler):
            old.close()  # its flushing thread ends (after a last flush)
    root.addHandler(handler)
    root.setLevel(level)
    global _access_writer
    assert isinstance(handler, NodeLogHandler)
    _access_writer = AccessWriter(handler, chosen_format(environ), node_name(environ))
    return handler


class AccessWriter:
    """Writes access lines straight to the node's handler, in its format.

    An access line is the one line written for every request: through `logging` (a
    record, the filters, the formatter's generic walk over the record) it was the
    largest part of what JSON logs cost a request (issue 29: under 5% in all). The line
    is the same as the handler would write, and it is written under the handler's lock,
    so it never interleaves with another line."""

    def __init__(self, handler: NodeLogHandler, log_format: str, node: str) -> None:
        self.handler = handler
        self.json = log_format == "json"
        self.node = node
        self._node_json = _json_string(node)
        self._logger_json = _json_string(access_log.name)
        self._second = -1
        self._second_text = ""

    def write(self, record: RequestRecord) -> None:
        now = time.time()
        duration_ms = round(record.duration_seconds * 1000, 2)
        message = f"{record.method} {record.route} {record.status} {duration_ms:.2f}ms {record.response_bytes}B"
        second = int(now)
        if second != self._second:
            self._second = second
            layout = "%Y-%m-%dT%H:%M:%S" if self.json else "%Y-%m-%d %H:%M:%S"
            self._second_text = time.strftime(layout, time.gmtime(second) if self.json else time.localtime(second))
        millis = int((now - second) * 1000)
        if self.json:
            # The fields of JsonFormatter's line in its order, each value encoded as
            # json.dumps would: a fifth of the cost of building and dumping a dict.
            text = (
                f'{{"time": "{self._second_text}.{millis:03d}Z", "level": "info", "logger": {self._logger_json}, '
                f'"message": {_json_string(message)}, "node": {self._node_json}, "request_id": {_json_string(record.request_id)}'
            )
            if record.tenant_id:
                text += f', "tenant_id": {_json_string(record.tenant_id)}'
            text += (
                f', "kind": {_json_string(record.kind)}, "method": {_json_string(record.method)}, "route": {_json_string(record.route)}'
                f', "status": {record.status}, "duration_ms": {duration_ms!r}, "bytes": {record.response_bytes}'
            )
            ids = resource_ids(record)
            if ids:
                text += ', "resource_ids": ' + json.dumps(ids, ensure_ascii=False)
            text += "}"
        else:
            text = f"{self._second_text},{millis:03d} INFO {access_log.name}: {message} request_id={record.request_id}"
        self.handler.write_line(text)


_access_writer: AccessWriter | None = None


def access_line(record: RequestRecord) -> None:
    """The request observer of the access log: one line per answered API request."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    writer = _access_writer
    if writer is not None and writer.handler in logging.root.handlers and not access_log.handlers and access_log.propagate:
        writer.write(record)  # the node's handler alone writes it: straight there
        return
    duration_ms = round(record.duration_seconds * 1000, 2)
    access_log.info(
        "%s %s %d %.2fms %dB",
        record.method, record.route, record.status, duration_ms, record.response_bytes,
        extra={
            "kind": record.kind,
            "method": record.method,
            "route": record.route,
            "status": record.status,
            "duration_ms": duration_ms,
            "bytes": record.response_bytes,
            "request_id": record.request_id,
            "tenant_id": record.tenant_id,
            "resource_ids": resource_ids(record),
        },
    )
