"""HTTP layer: routing, authentication, scopes, rate limits, error envelope, SSE, WebSocket."""

from .app import api_document, create_app, routes_of
from .principal import Principal
from .routing import Route, Router
from .server import run_api, serve

__all__ = ["Principal", "Route", "Router", "api_document", "create_app", "routes_of", "run_api", "serve"]
