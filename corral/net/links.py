"""Links and network namespaces through pyroute2, owned by one thread.

pyroute2 0.9's synchronous `IPRoute` runs its own asyncio loop, so it must not be
called from trio's thread, and one socket must not be used from several threads.
`Netlink` therefore owns a single-thread executor holding one host `IPRoute`;
trio code awaits `Netlink.call(fn, ...)`, which runs `fn(ipr, ...)` on that thread.
Namespaces are named (bind-mounted under /run/netns, as `ip netns` does), so they
outlive the processes in them: an instance keeps its network across stop/start and
across a restart of the control plane.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import trio
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .errors import NetworkError

IFF_UP = 0x1

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


def netns_path(name: str) -> str:
    return f"{NETNS_DIR}/{name}"


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {result.stderr.strip()}")


class Netlink:
    """The one owner of the host's rtnetlink socket."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-netlink")
        self._ipr: IPRoute | None = None

    def _host(self) -> IPRoute:
        if self._ipr is None:
            self._ipr = IPRoute()
        return self._ipr

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        future = self._executor.submit(lambda: fn(self._host(), *args))
        return await trio.to_thread.run_sync(future.result)

    def close(self) -> None:
        def _close() -> None:
            if self._ipr is not None:
                self._ipr.close()
                self._ipr = None

        self._executor.submit(_close).result()
        self._executor.shutdown(wait=True)


# -- operations, run on the netlink thread -------------------------------------


def link_index(ipr: IPRoute, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None


def ensure_bridge(ipr: IPRoute, name: str, address: str, prefixlen: int) -> None:
    """Create the bridge if missing, give it the gateway address, bring it up.

    The bridge gets a fixed MAC: left to itself a Linux bridge takes the lowest MAC
    of its ports and changes it as veths come and go, and every instance that
    cached the gateway's old MAC loses its packets to the host until its neighbour
    entry expires (the agent "does not answer" for several seconds).
    """
    index = link_index(ipr, name)
    if index is None:
        ipr.link("add", ifname=name, kind="bridge")
        index = link_index(ipr, name)
        assert index is not None
    mac = mac_for(address)
    if ipr.get_links(index)[0].get_attr("IFLA_ADDRESS") != mac:
        ipr.link("set", index=index, address=mac)
    addresses = {a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=index, family=2)}
    if address not in addresses:
        ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
    ipr.link("set", index=index, state="up")


def delete_link(ipr: IPRoute, name: str) -> bool:
    index = link_index(ipr, name)
    if index is None:
        return False
    try:
        ipr.link("del", index=index)
    except NetlinkError as exc:
        if exc.code != 19:  # ENODEV: already gone
            raise
    return True


def links_with_prefix(ipr: IPRoute, prefix: str) -> list[str]:
    names = [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()]
    return [name for name in names if name and name.startswith(prefix)]


def mac_for(address: str) -> str:
    """A locally administered MAC derived from the IPv4 address (as Docker does).

    An address goes from one veth to the next (an instance started again, a new
    instance given a released address) while the host's neighbour entry for it may
    still hold the previous veth's MAC for several seconds: connections to the new
    agent then vanish until the entry expires. With the MAC a function of the
    address, every neighbour entry for an address is right for whoever holds it.
    """
    octets = [int(part) for part in address.split(".")]
    return "02:42:" + ":".join(f"{octet:02x}" for octet in octets)


def forget_neighbour(ipr: IPRoute, bridge: str, address: str) -> None:
    """Drop the host's neighbour entry for `address` on the bridge, if it has one."""
    bridge_index = link_index(ipr, bridge)
    if bridge_index is None:
        return
    try:
        ipr.neigh("del", dst=address, ifindex=bridge_index)
    except NetlinkError as exc:
        if exc.code not in (2, 19):  # ENOENT, ENODEV: nothing to forget
            raise


def create_veth(
    ipr: IPRoute,
    host_name: str,
    netns: str,
    bridge: str,
    address: str,
    prefixlen: int,
    gateway: str,
) -> bool:
    """A veth pair: `host_name` on the bridge, `eth0` inside `netns` with `address`;
    True when the pair was there already, as made, and kept.

    An instance started again finds its pair as its last boot left it (a stop keeps
    the network): then nothing is made again. Deleting a veth waits for the kernel's
    RCU grace periods (20 to 40 ms measured, and the nftables commit after it slowed as
    much again), which was most of a restart. The pair is kept only when every piece
    is exactly what this function makes; the tenant cannot have changed one (the
    namespace belongs to the host's user namespace, so root in the instance has no
    CAP_NET_ADMIN over it)."""
    if veth_in_place(ipr, host_name, netns, bridge, address, prefixlen, gateway):
        ipr.brport("set", index=link_index(ipr, host_name), isolated=1)  # as made, whatever it says
        return True
    delete_link(ipr, host_name)
    ipr.link("add", ifname=host_name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": netns_path(netns)})
    index = link_index(ipr, host_name)
    bridge_index = link_index(ipr, bridge)
    if index is None or bridge_index is None:
        raise NetworkError(f"veth {host_name} or bridge {bridge} missing after creation")
    ipr.link("set", index=index, master=bridge_index, state="up")
    # Isolated bridge ports cannot exchange frames with each other, only with the
    # bridge itself: instances never see each other even at layer 2.
    ipr.brport("set", index=index, isolated=1)
    forget_neighbour(ipr, bridge, address)
    with netlink_in(netns) as inside:
        eth0 = inside.link_lookup(ifname="eth0")[0]
        kind = inside.get_links(eth0)[0].get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND")
        if kind != "veth":  # never configure anything but the instance's own veth end
            raise NetworkError(f"eth0 in {netns} is a {kind!r}, not the instance's veth")
        lo = inside.link_lookup(ifname="lo")[0]
        inside.link("set", index=eth0, address=mac_for(address))
        inside.addr("add", index=eth0, address=address, prefixlen=prefixlen)
        inside.link("set", index=eth0, state="up")
        inside.link("set", index=lo, state="up")
        inside.route("add", dst="default", gateway=gateway)
    return False


def veth_in_place(
    ipr: IPRoute, host_name: str, netns: str, bridge: str, address: str, prefixlen: int, gateway: str
) -> bool:
    """Whether `create_veth` made this pair and it is still as made: the host end up
    on the bridge; `eth0` inside a veth with the address, its MAC and the
    default route, `lo` up."""
    index, bridge_index = link_index(ipr, host_name), link_index(ipr, bridge)
    if index is None or bridge_index is None:
        return False
    host = ipr.get_links(index)[0]
    if host.get_attr("IFLA_MASTER") != bridge_index or not host["flags"] & IFF_UP:
        return False
    if host.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "veth":
        return False
    with netlink_in(netns) as inside:
        found = inside.link_lookup(ifname="eth0")
        loopback = inside.link_lookup(ifname="lo")
        if not found or not loopback:
            return False
        eth0 = inside.get_links(found[0])[0]
        if eth0.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "veth" or not eth0["flags"] & IFF_UP:
            return False
        if eth0.get_attr("IFLA_ADDRESS") != mac_for(address) or not inside.get_links(loopback[0])[0]["flags"] & IFF_UP:
            return False
        addresses = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in inside.get_addr(index=found[0], family=socket.AF_INET)}
        if addresses != {(address, prefixlen)}:
            return False
        routes = inside.get_default_routes(family=socket.AF_INET)
        return len(routes) == 1 and routes[0].get_attr("RTA_GATEWAY") == gateway and routes[0].get_attr("RTA_OIF") == found[0]


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NetworkError(f"setns: {os.strerror(errno)}")


@contextmanager
def netlink_in(netns: str) -> Iterator[IPRoute]:
    """An IPRoute socket inside `netns`, opened by this thread visiting it.

    A netlink socket stays bound to the namespace it was created in, so the thread
    enters the namespace, opens the socket and returns at once. That costs well under
    a millisecond, where `IPRoute(netns=...)` starts a helper process (about 20 ms).
    Only the calling (netlink) thread changes namespace; the rest of the process
    does not notice.
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(netns_path(netns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            inside = IPRoute()
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)
    try:
        yield inside
    finally:
        inside.close()


def create_netns(name: str) -> None:
    if not os.path.exists(netns_path(name)):
        _run(["ip", "netns", "add", name])


def delete_netns(name: str) -> bool:
    if not os.path.exists(netns_path(name)):
        return False
    _run(["ip", "netns", "delete", name])
    return True


def netns_with_prefix(prefix: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(NETNS_DIR) if name.startswith(prefix))
    except FileNotFoundError:
        return []
