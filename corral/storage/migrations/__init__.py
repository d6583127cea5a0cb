"""Numbered schema migrations, one SQL file each, shared by SQLite and PostgreSQL.

The SQL uses the common subset of both: TEXT, BIGINT, and `{blob}` for binary
columns (BLOB or BYTEA). Ids are UUID or ULID strings, timestamps ISO 8601 UTC text
with a fixed width (so they sort), booleans 0/1 integers, JSON as text.
"""
