"""Previews: exposed sandbox ports, preview and share tokens, preview domains, computers'
desktops and stream tokens, and the resolvers the preview router (corral/net/preview)
asks about every sandbox and computer request."""

from . import store
from .access import COOKIE, PreviewAccess, access_for, forget_all, forget_sandbox, forget_share
from .access_cache import AccessCache
from .desktops import COMPUTER_HOST_PATTERN, DesktopAccess, desktop_urls, mint_stream_token
from .domains import (
    DOMAIN,
    MAX_DOMAIN,
    SCOPES,
    Scope,
    delete_domain,
    dns_instructions,
    domain_public,
    get_domain,
    normalize_domain,
    put_domain,
    recheck_forever,
    recheck_once,
    url_domain,
    verify,
)
from .exposure import expose, parse_port
from .requests import ExposePort, PreviewTokenRequest, ShareRequest
from .router import build_router, run_preview
from .sharing import create_share, list_shares, mint_preview_token, revoke_share
from .store import DomainRecord, PreviewRecord, ShareRecord
from .tokens import read_preview_token, read_stream_token, sign_preview_token, sign_stream_token
from .urls import SANDBOX_HOST_PATTERN, router_host, sandbox_url, service_domain

__all__ = [
    "COMPUTER_HOST_PATTERN",
    "COOKIE",
    "DOMAIN",
    "MAX_DOMAIN",
    "SANDBOX_HOST_PATTERN",
    "SCOPES",
    "AccessCache",
    "DesktopAccess",
    "DomainRecord",
    "ExposePort",
    "PreviewAccess",
    "PreviewRecord",
    "PreviewTokenRequest",
    "Scope",
    "ShareRecord",
    "ShareRequest",
    "access_for",
    "build_router",
    "create_share",
    "delete_domain",
    "desktop_urls",
    "dns_instructions",
    "domain_public",
    "expose",
    "forget_all",
    "forget_sandbox",
    "forget_share",
    "get_domain",
    "list_shares",
    "mint_preview_token",
    "mint_stream_token",
    "normalize_domain",
    "parse_port",
    "put_domain",
    "read_preview_token",
    "read_stream_token",
    "recheck_forever",
    "recheck_once",
    "revoke_share",
    "router_host",
    "run_preview",
    "sandbox_url",
    "service_domain",
    "sign_preview_token",
    "sign_stream_token",
    "store",
    "url_domain",
    "verify",
]
