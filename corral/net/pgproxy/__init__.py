"""The connection proxy in front of managed databases (scale to zero, wake on connect),
and the nftables set that says which instances may reach which database port."""

from .access import DatabaseAccess
from .protocol import ProtocolError, error_response
from .proxy import DatabaseProxy, DatabaseProxyHooks, ProxyRefusal

__all__ = ["DatabaseAccess", "DatabaseProxy", "DatabaseProxyHooks", "ProtocolError", "ProxyRefusal", "error_response"]
