"""Parsing what the desktop tools print (`corral.actors.computers.desktop`)."""

from __future__ import annotations

from corral.actors.computers.desktop import parse_windows


def test_a_window_gone_while_listed_is_skipped_not_an_error() -> None:
    listing = "active 4194307\nwindow 0x400003 0 0 640 480 _NET_WM_STATE_FOCUSED\nterm\nwindow 0x400009    \ngone\n"
    assert [w["title"] for w in parse_windows(listing)] == ["term"]
