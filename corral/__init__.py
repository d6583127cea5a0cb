"""Corral: an open, multi-tenant compute platform served as an HTTP API."""

__version__ = "0.1.0"
