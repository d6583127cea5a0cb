"""The API's answers about snapshots (contract §10 and the specification's error table)."""

from __future__ import annotations

from corral.errors import ApiError


def snapshot_not_found() -> ApiError:
    return ApiError(404, "SNAPSHOT_NOT_FOUND", "snapshot not found")


def snapshot_not_ready() -> ApiError:
    return ApiError(409, "SNAPSHOT_NOT_READY", "snapshot is not in ready state")


def already_deleted() -> ApiError:
    return ApiError(409, "already_deleted", "snapshot already deleted")
