"""A persisted allocator of instance addresses.

One JSON file maps owner (instance id) to address. Every change happens under an
exclusive `flock` and is written atomically (temp file + rename), so two processes
on one data directory never hand out the same address and a crash never leaves a
half-written file. The network address, the gateway (the bridge's address, the
first host) and the broadcast address are never handed out.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import AddressExhausted


def gateway_address(subnet: str) -> str:
    """The bridge's address in the instances' range (its first host): where node services listen."""
    return str(next(ipaddress.IPv4Network(subnet).hosts()))


LAST_KEY = "<last>"
"""Where the file keeps the address handed out last (never an owner: owners are ids)."""


class AddressAllocator:
    def __init__(self, path: Path, subnet: str) -> None:
        self.path = Path(path)
        self.network = ipaddress.IPv4Network(subnet)
        self.gateway = ipaddress.IPv4Address(gateway_address(subnet))

    @contextmanager
    def _locked(self) -> Iterator[dict[str, str]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            assigned = self._read()
            before = dict(assigned)
            yield assigned
            if assigned != before:
                self._write(assigned)

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if data.get("subnet") != str(self.network):
            return {}
        return dict(data.get("assigned", {}))

    def _write(self, assigned: dict[str, str]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"subnet": str(self.network), "assigned": assigned}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def allocate(self, owner: str) -> ipaddress.IPv4Address:
        """The owner's address; a new one if it has none yet: the first free one after the
        last handed out, wrapping around. An address just released is thus the last to be
        used again: whatever the host still keeps about it (a neighbour entry, a
        connection-tracking entry of the previous holder) has long expired by then; reused
        at once, the next instance's first connection could wait a second for a SYN
        retransmit."""
        with self._locked() as assigned:
            if owner in assigned:
                return ipaddress.IPv4Address(assigned[owner])
            last = assigned.get(LAST_KEY)
            used = {value for key, value in assigned.items() if key != LAST_KEY}
            hosts = [host for host in self.network.hosts() if host != self.gateway]
            start = 0
            if last is not None:
                start = next((i + 1 for i, host in enumerate(hosts) if str(host) == last), 0)
            for host in hosts[start:] + hosts[:start]:
                if str(host) in used:
                    continue
                assigned[owner] = str(host)
                assigned[LAST_KEY] = str(host)
                return host
        raise AddressExhausted(f"no free address left in {self.network}")

    def release(self, owner: str) -> None:
        with self._locked() as assigned:
            assigned.pop(owner, None)

    def lookup(self, owner: str) -> ipaddress.IPv4Address | None:
        with self._locked() as assigned:
            value = assigned.get(owner) if owner != LAST_KEY else None
        return ipaddress.IPv4Address(value) if value else None

    def assignments(self) -> dict[str, str]:
        with self._locked() as assigned:
            return {owner: address for owner, address in assigned.items() if owner != LAST_KEY}
