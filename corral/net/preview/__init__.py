"""The preview router: a fast HTTP/1.1 reverse proxy from browsers to apps in instances.

It owns no policy: a `RouteTable` maps hosts to resolvers that the composition
supplies (the sandbox resolver checks tokens and finds the instance), so this
package never imports the actors layer.
"""

from .http1 import ChunkedScanner, Framing, Head, HttpError, parse_request, parse_response
from .pages import page
from .proxy import PreviewRouter
from .routes import (
    RELAY_HEADER,
    Decision,
    Forward,
    PreviewRequest,
    RelayCheck,
    Reply,
    Resolver,
    RouteTable,
    Upstream,
    strip_query_params,
)
from .upstream import Connector, UpstreamUnreachable, socket_in_netns

__all__ = [
    "RELAY_HEADER",
    "ChunkedScanner",
    "Connector",
    "Decision",
    "Forward",
    "Framing",
    "Head",
    "HttpError",
    "PreviewRequest",
    "PreviewRouter",
    "RelayCheck",
    "Reply",
    "Resolver",
    "RouteTable",
    "Upstream",
    "UpstreamUnreachable",
    "page",
    "parse_request",
    "parse_response",
    "socket_in_netns",
    "strip_query_params",
]
