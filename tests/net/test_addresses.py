"""The persisted address allocator."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from corral.actors.runtime_errors import answer_for
from corral.net import AddressAllocator, AddressExhausted


def test_allocate_release_persist(tmp_path: Path) -> None:
    path = tmp_path / "addresses.json"
    allocator = AddressAllocator(path, "10.50.0.0/29")
    assert str(allocator.gateway) == "10.50.0.1"
    a = allocator.allocate("a")
    assert str(a) == "10.50.0.2"
    assert allocator.allocate("a") == a  # stable per owner
    b = allocator.allocate("b")
    assert str(b) == "10.50.0.3"
    # A second allocator on the same file (another process, a restart) agrees.
    again = AddressAllocator(path, "10.50.0.0/29")
    assert again.lookup("b") == b
    assert str(again.allocate("c")) == "10.50.0.4"
    allocator.release("a")
    assert allocator.lookup("a") is None
    # A released address is the last to come back: the next free after the last handed
    # out, wrapping around (the host's neighbour and conntrack entries of the previous
    # holder expire meanwhile).
    assert str(allocator.allocate("d")) == "10.50.0.5"
    assert str(allocator.allocate("e")) == "10.50.0.6"
    assert str(allocator.allocate("f")) == "10.50.0.2"
    assert set(allocator.assignments()) == {"b", "c", "d", "e", "f"}
    assert AddressAllocator(path, "10.50.0.0/29").lookup("<last>") is None


def test_exhaustion(tmp_path: Path) -> None:
    allocator = AddressAllocator(tmp_path / "a.json", "10.50.0.0/30")  # one usable besides the gateway
    assert allocator.allocate("x") == ipaddress.IPv4Address("10.50.0.2")
    with pytest.raises(AddressExhausted) as excinfo:
        allocator.allocate("y")
    assert answer_for(excinfo.value) == (503, "SERVICE_UNAVAILABLE")


def test_corrupt_or_foreign_file_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text("not json")
    assert AddressAllocator(path, "10.50.0.0/24").assignments() == {}
    AddressAllocator(path, "10.50.0.0/24").allocate("x")
    assert AddressAllocator(path, "10.60.0.0/24").assignments() == {}  # another range
