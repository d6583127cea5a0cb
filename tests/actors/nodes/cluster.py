"""Three real `corral serve` nodes, each in a network namespace of its own (issue 30).

Each node's namespace is joined to the host by a veth pair with a /30 of its own in
10.230.<slot>.0/24, and has a default route through the host (which forwards), so a
node reaches PostgreSQL (on the host side of its link) and the other nodes only at their
advertised addresses; the test (on the host) reaches each node there too. Inside its
namespace each node has its own bridge, instance subnet (10.231-233.<slot>.0/24),
nftables tables, cgroup parent and data directory.

`ip netns exec` replaces /sys by a sysfs of the namespace (so that /sys/class/net, which
the node reads, shows its own links), which drops the cgroup hierarchies mounted under
/sys/fs/cgroup: the node's command first mounts them again, as the host has them (the
same hierarchies, so the host's cleanup finds every instance's cgroup)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.pg_server import _as_user, _service_user, find_pg_bin
from tests.serve_process import wait_for
from tests.support import (
    ADMIN_KEY,
    DB_PORTS,
    PASSWORD,
    RUNTIME_SETTINGS,
    TEST_SLOT,
    cleanup_host,
    free_port,
)

LINKS = f"10.230.{TEST_SLOT}"
"""The nodes' links: node i has LINKS.(4i+1) on the host side and LINKS.(4i+2) inside."""
API_PORT, PREVIEW_PORT = 8080, 8081
"""Every node listens on these in its own namespace: no other process shares its ports."""
LETTERS = ("a", "b", "c")
CLUSTER_KEK = "5c" * 32
"""Every node of a cluster has the same key-encryption key (README): a secret one node
sealed (a database's password) is read on another (its replica's node)."""


@dataclass
class Node:
    name: str
    netns: str
    host_link: str
    host_address: str
    address: str
    runtime: dict[str, str]
    """Its host names inside its namespace (bridge, subnet, tables, prefixes, cgroup parent)."""
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base(self) -> str:
        """Its advertised API URL (the test reaches it there, as the other nodes do)."""
        return f"http://{self.address}:{API_PORT}"

    @property
    def preview(self) -> str:
        return f"http://{self.address}:{PREVIEW_PORT}"

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""


@dataclass
class Cluster:
    nodes: dict[str, Node]
    database_url: str
    root: Path

    def kill_machine(self, node: Node) -> None:
        """As if its machine died: `kill -9` of the node and of everything else in its
        namespace (its database servers, which outlive the node's process otherwise)."""
        assert node.process is not None
        node.process.kill()
        node.process.wait()
        pids = subprocess.run(["ip", "netns", "pids", node.netns], capture_output=True, text=True, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        node.process = None  # nothing left to stop

    def restart(self, node: Node) -> None:
        """The node started again on its data directory, answering."""
        start_node(node, self.root, self.database_url)
        wait_answering(node)

    def owner_key(self, node: str, name: str, email: str) -> str:
        """A new tenant's owner key, made through `node`."""
        created = httpx.post(
            f"{self.nodes[node].base}/api/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            json={"name": name, "owner_email": email, "owner_password": PASSWORD}, timeout=30,
        )
        assert created.status_code == 201, created.text
        return str(created.json()["data"]["api_key"]["key"])


def plan() -> dict[str, Node]:
    """The three nodes' names and addresses in this test slot."""
    slot = str(TEST_SLOT)
    nodes = {}
    for i, letter in enumerate(LETTERS):
        nodes[f"node-{letter}"] = Node(
            name=f"node-{letter}", netns=f"corr3n{slot}{letter}", host_link=f"c3h{slot}{letter}",
            host_address=f"{LINKS}.{4 * i + 1}", address=f"{LINKS}.{4 * i + 2}",
            runtime={
                "CORRAL_BRIDGE": f"corr3b{slot}{letter}", "CORRAL_SUBNET": f"10.{231 + i}.{slot}.0/24",
                "CORRAL_NFT_TABLE": f"corral_3n{slot}{letter}", "CORRAL_LINK_PREFIX": f"3{letter}{slot}",
                "CORRAL_NETNS_PREFIX": f"corr3{letter}{slot}-", "CORRAL_CGROUP_PARENT": f"corral-3n{slot}{letter}",
            },
        )
    return nodes


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"


def make_namespace(node: Node) -> None:
    """The node's namespace, its link to the host and its default route through the host."""
    _ip("netns", "add", node.netns)
    _ip("-n", node.netns, "link", "set", "lo", "up")
    inside = f"{node.host_link}i"
    _ip("link", "add", node.host_link, "type", "veth", "peer", "name", inside, "netns", node.netns)
    _ip("addr", "add", f"{node.host_address}/30", "dev", node.host_link)
    _ip("link", "set", node.host_link, "up")
    _ip("-n", node.netns, "addr", "add", f"{node.address}/30", "dev", inside)
    _ip("-n", node.netns, "link", "set", inside, "up")
    _ip("-n", node.netns, "route", "add", "default", "via", node.host_address)


def remove_host_side(node: Node) -> None:
    """Everything of the node's outside its namespace, then the namespace (its bridge,
    links and tables go with it). Idempotent."""
    names = {"bridge": "CORRAL_BRIDGE", "link_prefix": "CORRAL_LINK_PREFIX", "netns_prefix": "CORRAL_NETNS_PREFIX",
             "nft_table": "CORRAL_NFT_TABLE", "cgroup_parent": "CORRAL_CGROUP_PARENT"}
    cleanup_host(**{name: node.runtime[variable] for name, variable in names.items()})
    subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True)
    subprocess.run(["ip", "link", "delete", node.host_link], capture_output=True)


def _remount_cgroups() -> str:
    """Shell commands that mount the host's cgroup hierarchies again under a fresh /sys."""
    commands = ["mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup"]
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, path, kind, options, *_ = line.split()
            if not path.startswith("/sys/fs/cgroup/") or kind not in ("cgroup", "cgroup2"):
                continue
            kept = ",".join(o for o in options.split(",") if o not in ("rw", "relatime", "nosuid", "nodev", "noexec"))
            flags = f"-o {shlex.quote(kept)} " if kept else ""
            commands.append(f"mkdir -p {shlex.quote(path)} && mount -t {kind} {flags}cgroup {shlex.quote(path)}")
    return " && ".join(commands)


@contextlib.contextmanager
def postgres_for(nodes: dict[str, Node]) -> Iterator[str]:
    """A PostgreSQL server on the host, listening on loopback and the host side of every
    node's link, trusting only this slot's links; yields the URL of database `corral` at
    127.0.0.1 (a node's own URL names its link's host address instead)."""
    bin_dir = find_pg_bin()
    assert bin_dir is not None, "PostgreSQL server binaries not found; tools/test installs them"
    user = _service_user()
    base = Path(tempfile.mkdtemp(prefix="corral-pg3-"))
    os.chown(base, user.pw_uid, user.pw_gid)
    data = base / "data"
    port = free_port()
    listen = ",".join(["127.0.0.1", *(node.host_address for node in nodes.values())])
    try:
        _as_user(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", "corral", "-A", "trust", "--no-sync", "-E", "UTF8"])
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {LINKS}.0/24 trust\n")
        _as_user(user, [
            str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(base / "log"), "start",
            "-o", f"-p {port} -k {base} -c listen_addresses={listen} -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off -c max_connections=200",
        ])
        _as_user(user, [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "corral", "corral"])
        yield f"postgresql://corral@127.0.0.1:{port}/corral"
    finally:
        with contextlib.suppress(Exception):
            _as_user(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(base, ignore_errors=True)


def start_node(node: Node, root: Path, database_url: str) -> None:
    """`corral serve` in the node's namespace, advertising its link's address."""
    directory = root / node.name
    directory.mkdir(exist_ok=True)  # a restart's is the node's own
    node.log_path = directory / "node.log"
    env = {
        **os.environ, "CORRAL_ADMIN_KEY": ADMIN_KEY, "CORRAL_KEK": CLUSTER_KEK, "CORRAL_PREPARE_TEMPLATES": "0", "CORRAL_EGRESS_PROXY": "0",
        "CORRAL_WARM_POOL": "0", "CORRAL_SSE_HEARTBEAT_SECONDS": "1", "CORRAL_DATABASE_HOST": node.address,
        "CORRAL_DATABASE_PORTS": DB_PORTS, "CORRAL_TEMPLATE_DIR": str(RUNTIME_SETTINGS["template_dir"]),
        "CORRAL_DATABASE_URL": database_url.replace("@127.0.0.1:", f"@{node.host_address}:"), **node.runtime,
    }
    serve = [sys.executable, "-m", "corral", "serve", "--host", "0.0.0.0", "--port", str(API_PORT),
             "--preview-port", str(PREVIEW_PORT), "--data-dir", str(directory / "data"),
             "--node-name", node.name, "--advertise", node.base]
    with open(node.log_path, "ab") as log_file:
        node.process = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "sh", "-c", f'{_remount_cgroups()} && exec "$@"', "sh", *serve],
            env=env, stdout=log_file, stderr=log_file,
        )


def wait_answering(node: Node, seconds: float = 60) -> None:
    def answering() -> bool:
        assert node.process is not None and node.process.poll() is None, node.log()
        try:
            return httpx.get(f"{node.base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(f"{node.name} answering at {node.base}", answering, seconds)


def stop_node(node: Node) -> None:
    """SIGTERM, then a kill if it has not left within 30 s; it must have exited 0."""
    process = node.process
    if process is None:
        return
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
        assert code == 0, node.log()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def all_active(node: Node, names: set[str]) -> None:
    """Until `node` lists every one of `names` as an active node."""

    def active() -> bool:
        listed = httpx.get(f"{node.base}/api/v1/admin/nodes", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=5)
        assert listed.status_code == 200, listed.text
        return {n["name"] for n in listed.json()["data"] if n["state"] == "active"} >= names

    wait_for("every node active", active, 30)


@contextlib.contextmanager
def three_nodes(root: Path) -> Iterator[Cluster]:
    """The three nodes, answering and active; everything removed afterwards, even after a failure."""
    nodes = plan()
    for node in nodes.values():  # what a run that died left
        remove_host_side(node)
    try:
        for node in nodes.values():
            make_namespace(node)
        with open("/proc/sys/net/ipv4/ip_forward", "w") as forward:  # the host routes between the links
            forward.write("1")
        with postgres_for(nodes) as url:
            try:
                for node in nodes.values():
                    start_node(node, root, url)
                for node in nodes.values():
                    wait_answering(node)
                all_active(nodes["node-a"], set(nodes))
                yield Cluster(nodes, url, root)
            finally:
                errors = []
                for node in nodes.values():
                    try:
                        stop_node(node)
                    except AssertionError as exc:
                        errors.append(exc)
                if errors:
                    raise errors[0]
    finally:
        time.sleep(0.05)
        for node in nodes.values():
            remove_host_side(node)
