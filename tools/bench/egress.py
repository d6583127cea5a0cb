"""Egress proxy cost: added latency (p50, p99) and throughput, proxied against bypassed.

An instance's network (namespace, veth, chain) and a stand-in internet namespace
with one server listening on four ports: 80 and 443 are redirected to the egress
proxy by nftables, 8080 and 8443 are not (the bypass). A client inside the
instance's namespace makes kept-alive GETs, HTTP and HTTPS, on both ways in
alternating rounds of the same run, then downloads 50 MB (plain HTTP and HTTPS)
proxied and direct in alternating rounds, so noise on the shared machine falls on
both ways alike. The client trusts the egress CA for 443 and the internet's own CA
for 8443.

Goals (issues 15, 28): at most 1 ms added at p50 for HTTP, 3 ms for HTTPS; a download
at least 0.8x the direct throughput.

Beside each ratio it prints what the downloads cost in CPU, each way: the client's,
the server's and the proxy's CPU ms per MB (their own processes, from /proc), and the
machine's with the cores kept busy (that one counts whatever else runs). Client,
server and proxy share the machine's cores; where a way keeps them all busy it is
bound by CPU, and the ratio is then at best the direct way's CPU per MB over the
proxied way's.

`--chunked` downloads bodies sent chunked (16 KiB chunks) instead of with a length:
the path where h11 parses the body, rather than the raw relay.

The stand-in server names its listeners itself: `HTTPServer` would ask a reverse lookup
of each address, which in a namespace with no name server waits out a 10 s timeout.

    sudo .venv/bin/python -m tools.bench.egress [--requests 2000] [--megabytes 50] [--rounds 5] [--chunked] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral.net import HostNetwork, NetworkConfig
from corral.net.egress import DestinationPolicy, EgressCA, EgressProxy, EgressProxyConfig
from tools.bench.common import free_port

INTERNET_HOST, INTERNET = "10.221.0.1", "10.221.0.2"
NETNS, OUTSIDE, INSIDE = "bench-egress-inet", "bneginet", "bneginetp"

LATENCY_GOALS_MS = {"http": 1.0, "https": 3.0}
THROUGHPUT_GOAL = 0.8
"""A download through the proxy, against the same download bypassing it (issue 28)."""

SERVER = r'''
import socketserver, ssl, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
CHUNK = b"x" * 65536
class Server(ThreadingHTTPServer):
    def server_bind(self):
        # Not HTTPServer's: it asks socket.getfqdn (see the module docstring).
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *args): pass
    def do_GET(self):
        if self.path.startswith("/chunked/"):  # 16 KiB chunks (--chunked)
            size = int(self.path.split("/")[2])
            self.send_response(200); self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
            while size:
                piece = CHUNK[:min(size, 16384)]; self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece)); size -= len(piece)
            self.wfile.write(b"0\r\n\r\n")
        elif self.path.startswith("/big/"):
            size = int(self.path.split("/")[2])
            self.send_response(200); self.send_header("Content-Length", str(size)); self.end_headers()
            while size:
                piece = CHUNK[:min(size, len(CHUNK))]; self.wfile.write(piece); size -= len(piece)
        else:
            self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
cert, key, host = sys.argv[1], sys.argv[2], sys.argv[3]
for port, tls in ((80, False), (8080, False), (443, True), (8443, True)):
    server = Server((host, port), Handler)
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''

CLIENT = r'''
import http.client, json, ssl, sys, time
host, requests, megabytes, egress_ca, internet_ca = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rounds, pids, body = int(sys.argv[6]), {"proxy": sys.argv[7], "server": sys.argv[8], "client": "self"}, sys.argv[9]
def machine_ticks():
    # CPU ticks the whole machine spent busy (everything but idle and iowait): other work included.
    fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]
def ticks(pid):
    # A process's own CPU ticks, all its threads (user + system; network softirq time the
    # kernel accounts apart is only in the machine's figure).
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
def sample():
    return {"machine_ticks": machine_ticks(), **{f"{who}_ticks": ticks(pid) for who, pid in pids.items()}}
def connection(port):
    if port in (443, 8443):
        context = ssl.create_default_context(cafile=egress_ca if port == 443 else internet_ca)
        return http.client.HTTPSConnection(host, port, context=context)
    return http.client.HTTPConnection(host, port)
def get(conn, path):
    conn.request("GET", path); response = conn.getresponse(); return len(response.read())
def download(conn, path):
    # Read into one reused buffer: the client's own copies stay small and alike both ways.
    conn.request("GET", path); response = conn.getresponse(); buffer = bytearray(1 << 20); view = memoryview(buffer); got = 0
    while True:
        n = response.readinto(view)
        if not n: return got
        got += n
results = {}
pairs = {"http": (80, 8080), "https": (443, 8443)}
for name, (proxied, direct) in pairs.items():
    conns = {"proxied": connection(proxied), "direct": connection(direct)}
    times = {"proxied": [], "direct": []}
    for way, conn in conns.items():
        for _ in range(20): get(conn, "/")  # warm up: connections, leaf certificate
    for round_ in range(10):
        for way, conn in conns.items():
            for _ in range(requests // 10):
                start = time.perf_counter(); get(conn, "/"); times[way].append((time.perf_counter() - start) * 1000)
    results[name] = times
size = megabytes * 1024 * 1024
downloads = {}
for name, (proxied, direct) in pairs.items():
    speeds = {"proxied": [], "direct": []}
    cpu = {way: dict.fromkeys(["seconds", *sample()], 0.0) for way in speeds}
    for round_ in range(rounds):
        for way, port in (("proxied", proxied), ("direct", direct)):
            conn = connection(port)
            before = sample()
            start = time.perf_counter(); got = download(conn, f"/{body}/{size}"); elapsed = time.perf_counter() - start
            for key, value in sample().items(): cpu[way][key] += value - before[key]
            cpu[way]["seconds"] += elapsed
            conn.close()
            assert got == size, got
            speeds[way].append(size / elapsed / 1e6)
    downloads[name] = dict(speeds, cpu=cpu)
results["downloads"] = downloads
print(json.dumps(results))
'''


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True)


def internet_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A CA of the stand-in internet and a leaf for its address: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench internet CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, INTERNET)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(INTERNET))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def bench(requests: int, megabytes: int, rounds: int, work: Path, body: str = "big") -> dict[str, Any]:
    ca_file, cert, key = internet_tls(work)
    network = HostNetwork(
        NetworkConfig(
            state_dir=work / "network", bridge="corralbeg0", subnet="10.222.0.0/24", nft_table="corral_bench_egress",
            link_prefix="cb", netns_prefix="corralb-", egress_port=free_port(),
            open_destinations=(f"{INTERNET}/32",),  # the stand-in internet is a private range: the bypass must reach it
        )
    )
    for argv in (["ip", "netns", "delete", NETNS], ["ip", "link", "delete", OUTSIDE]):
        subprocess.run(argv, capture_output=True)
    server: subprocess.Popen[bytes] | None = None
    try:
        await network.setup()
        sh("ip", "netns", "add", NETNS)
        sh("ip", "link", "add", OUTSIDE, "type", "veth", "peer", "name", INSIDE, "netns", NETNS)
        sh("ip", "addr", "add", f"{INTERNET_HOST}/24", "dev", OUTSIDE)
        sh("ip", "link", "set", OUTSIDE, "up")
        sh("ip", "-n", NETNS, "addr", "add", f"{INTERNET}/24", "dev", INSIDE)
        sh("ip", "-n", NETNS, "link", "set", INSIDE, "up")
        sh("ip", "-n", NETNS, "link", "set", "lo", "up")
        sh("ip", "-n", NETNS, "route", "add", "default", "via", INTERNET_HOST)
        server = subprocess.Popen(
            ["ip", "netns", "exec", NETNS, sys.executable, "-c", SERVER, str(cert), str(key), INTERNET], stdout=subprocess.PIPE
        )
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        instance = await network.attach(str(uuid.uuid4()))
        ca = EgressCA(work / "egress-ca")
        assert network.config.egress_port is not None
        config = EgressProxyConfig(
            network.gateway, network.config.egress_port, DestinationPolicy.build(False, [f"{INTERNET}/32"]), ca_bundle=str(ca_file)
        )
        proxy = EgressProxy(config, ca)
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            result = await trio.run_process(
                ["ip", "netns", "exec", instance.netns, sys.executable, "-c", CLIENT, INTERNET, str(requests), str(megabytes),
                 str(ca.cert_path), str(ca_file), str(rounds), str(os.getpid()), str(server.pid), body],
                capture_stdout=True,
            )
            nursery.cancel_scope.cancel()
        data: dict[str, Any] = json.loads(result.stdout)
        return data
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "delete", OUTSIDE], capture_output=True)
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
        await network.teardown()
        network.close()


def summary(data: dict[str, Any], megabytes: int) -> dict[str, Any]:
    """The figures and their goals, as printed (and as `--json` gives them)."""
    out: dict[str, Any] = {"megabytes": megabytes, "latency": {}, "download": {}}
    for name, goal in LATENCY_GOALS_MS.items():
        proxied, direct = data[name]["proxied"], data[name]["direct"]
        out["latency"][name] = {
            "direct_p50_ms": percentile(direct, 0.5), "direct_p99_ms": percentile(direct, 0.99),
            "proxied_p50_ms": percentile(proxied, 0.5), "proxied_p99_ms": percentile(proxied, 0.99),
            "added_p50_ms": percentile(proxied, 0.5) - percentile(direct, 0.5),
            "added_p99_ms": percentile(proxied, 0.99) - percentile(direct, 0.99),
            "added_mean_ms": statistics.mean(proxied) - statistics.mean(direct),
            "goal_p50_ms": goal,
        }
        out["latency"][name]["met"] = out["latency"][name]["added_p50_ms"] <= goal
    for name, speeds in data["downloads"].items():
        direct_mbps, proxied_mbps = statistics.median(speeds["direct"]), statistics.median(speeds["proxied"])
        ratio = proxied_mbps / direct_mbps
        out["download"][name] = {
            "direct_mb_s": direct_mbps, "proxied_mb_s": proxied_mbps, "ratio": ratio, "goal_ratio": THROUGHPUT_GOAL,
            "met": ratio >= THROUGHPUT_GOAL, "rounds_direct": speeds["direct"], "rounds_proxied": speeds["proxied"],
            "cpu": cpu_cost(speeds["cpu"], len(speeds["direct"]) * megabytes),
        }
    return out


def cpu_cost(cpu: dict[str, dict[str, float]], megabytes: int) -> dict[str, float]:
    """What the downloads cost in CPU, per way: the client's, the server's and the proxy's
    own CPU ms per MB, the machine's (everything running, the kernel's network work
    included) and the cores it kept busy (a way near the machine's core count is bound by
    CPU, not by the network). On a machine bound by CPU the ratio can be no better than
    the direct way's cost over the proxied way's."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for way, row in cpu.items():
        out[f"{way}_machine_ms_per_mb"] = row["machine_ticks"] * tick_ms / megabytes
        out[f"{way}_cores_busy"] = row["machine_ticks"] * tick_ms / 1000 / row["seconds"] if row["seconds"] else 0.0
        for who in ("client", "server", "proxy"):
            out[f"{way}_{who}_ms_per_mb"] = row[f"{who}_ticks"] * tick_ms / megabytes
    return out


def report(out: dict[str, Any]) -> None:
    for name, row in out["latency"].items():
        print(
            f"{name:5} GET  direct p50 {row['direct_p50_ms']:.3f} ms p99 {row['direct_p99_ms']:.3f} ms | "
            f"proxied p50 {row['proxied_p50_ms']:.3f} ms p99 {row['proxied_p99_ms']:.3f} ms | "
            f"added p50 {row['added_p50_ms']:.3f} ms p99 {row['added_p99_ms']:.3f} ms "
            f"(goal p50 <= {row['goal_p50_ms']} ms: {'met' if row['met'] else 'MISSED'}) mean added {row['added_mean_ms']:.3f} ms"
        )
    for name, row in out["download"].items():
        print(
            f"{name:5} {out['megabytes']} MB {out.get('body', '')}download (median of {len(row['rounds_direct'])}): direct {row['direct_mb_s']:.0f} MB/s, "
            f"proxied {row['proxied_mb_s']:.0f} MB/s, ratio {row['ratio']:.2f} "
            f"(goal >= {row['goal_ratio']}x direct: {'met' if row['met'] else 'MISSED'})"
        )
        cpu = row["cpu"]
        for way in ("direct", "proxied"):
            print(
                f"{'':5} CPU ms per MB {way:7}: client {cpu[f'{way}_client_ms_per_mb']:.2f}, server "
                f"{cpu[f'{way}_server_ms_per_mb']:.2f}, proxy {cpu[f'{way}_proxy_ms_per_mb']:.2f}; machine "
                f"{cpu[f'{way}_machine_ms_per_mb']:.2f} ({cpu[f'{way}_cores_busy']:.1f} of {os.cpu_count()} cores busy)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=2000, help="GETs per way and scheme")
    parser.add_argument("--megabytes", type=int, default=50, help="size of each download")
    parser.add_argument("--rounds", type=int, default=5, help="downloads per way and scheme (the median counts)")
    parser.add_argument("--chunked", action="store_true", help="download chunked bodies (the parsed path)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (namespaces and nftables)")
    with tempfile.TemporaryDirectory() as work:
        data = trio.run(bench, args.requests, args.megabytes, args.rounds, Path(work), "chunked" if args.chunked else "big")
    out = summary(data, args.megabytes)
    if args.chunked:
        out["body"] = "chunked "
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        report(out)


if __name__ == "__main__":
    main()
