"""`corral admin top`: the node's live picture in a terminal (contract §19), from the
same endpoints as the console's operator page (`GET /admin/node`, `/admin/nodes`,
`/admin/actors`), refreshed every 2 s; `--once` prints one frame, `--json` the
endpoints' data. `corral admin nodes` lists the cluster's nodes, `corral admin drain
NAME` drains one (contract §20).

The admin key comes from `--api-key`, else `CORRAL_ADMIN_KEY`, else the usual
`CORRAL_API_KEY` / `corral login` chain (which holds a tenant's key, refused here)."""

from __future__ import annotations

import argparse
import shutil
import time
from datetime import datetime
from typing import Any

from corral.client import unwrap

from .context import Context, leaf

__all__ = ["frame", "register"]

ACTOR_COLUMNS = ("kind", "id", "state", "mailbox", "restarts", "crashes", "last_error")
NODE_COLUMNS = ("name", "state", "moving", "region", "advertise_url", "heartbeat_at", "resources")


def _use_admin_key(ctx: Context) -> None:
    """`--api-key`, else `CORRAL_ADMIN_KEY`, else the usual chain."""
    if ctx.args.api_key is None and ctx.env.get("CORRAL_ADMIN_KEY"):
        ctx.args.api_key = ctx.env["CORRAL_ADMIN_KEY"]


def snapshot(ctx: Context) -> dict[str, Any]:
    """One sample: the node's picture, the cluster's nodes and this node's live actors."""
    node = unwrap(ctx.client.get_admin_node())
    nodes = unwrap(ctx.client.list_admin_nodes())
    actors = unwrap(ctx.client.list_admin_actors())
    return {"node": node, "nodes": nodes, "actors": actors}


def top_actors(actors: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The actors an operator looks at first: the deepest mailboxes, then the most restarted."""
    ranked = sorted(
        actors,
        key=lambda a: (-int(a.get("mailbox_depth") or 0), -int(a.get("restarts") or 0), -int(a.get("recent_crashes") or 0), a["kind"], a["id"]),
    )
    return ranked[:limit]


def _duration(seconds: float) -> str:
    s = int(seconds)
    days, hours, minutes = s // 86400, s // 3600 % 24, s // 60 % 60
    return f"{days}d {hours}h" if days else f"{hours}h {minutes}m" if hours else f"{minutes}m {s % 60}s"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def frame(sample: dict[str, Any], limit: int, width: int = 120) -> list[str]:
    """The lines of one frame: the node panel, then the top actors as a table."""
    node, actors = sample["node"], sample["actors"]
    cap, load, summary, requests, pool = node["capacity"], node["load"], node["actors"], node["requests"], node["warm_pool"]
    kinds = ", ".join(f"{kind} {counts.get('running', 0)}/{sum(counts.values())}" for kind, counts in load["instances_by_kind"].items())
    mean = f"{requests['mean_ms']} ms" if requests["mean_ms"] is not None else "-"
    lines = [
        f"node {node['node']['name']}  up {_duration(node['node']['uptime_seconds'])}  {datetime.now():%H:%M:%S}",
        f"cores {cap['cpu_cores']}  load {' '.join(map(str, load['load_average'] or [])) or '-'}"
        f"  memory {cap['memory_available_mb']}/{cap['memory_total_mb']} MiB available"
        f"  disk {cap['disk_free_gb']}/{cap['disk_total_gb']} GiB free (reserve {cap['disk_reserve_gb']})",
        f"instances running here {load['instances_running']}  records running/all: {kinds}",
        f"requests {requests['per_second']}/s  errors {requests['errors']}  mean {mean}  (last {requests['window_seconds']} s; {requests['total']} since start)",
        f"actors {summary['live']} live ({summary['busy']} busy, {summary['failed']} failed)  mailboxes {summary['mailbox_depth']} queued"
        f" (max {summary['max_mailbox_depth']})  restarts {summary['restarts']}  crashes {summary['recent_crashes']}",
    ]
    if pool is not None:
        lines.append(f"warm pool {pool['ready_total']} ready of {pool['target']}  booting {pool['default_small']['booting']}"
                     f"  taken {pool['default_small']['taken']}  boot failures {pool['default_small']['boot_failures']}")
    for other in sample.get("nodes", []):
        lines.append(_cut(
            f"  node {other['name']} {other['state']}  {other['region']}  {other['advertise_url']}"
            f"  {other['resources']} instances  {other['load']['memory_mb_used']}/{other['capacity']['memory_mb']} MiB used", width,
        ))
    lines.append("")
    rows = [
        {
            "kind": a["kind"],
            "id": a["id"],
            "state": a.get("state") if a.get("status") == "alive" else a.get("status"),
            "mailbox": f"{a.get('mailbox_depth', 0)}/{a['mailbox_capacity']}" if a.get("mailbox_capacity") else str(a.get("mailbox_depth", 0)),
            "restarts": str(a.get("restarts", 0)),
            "crashes": str(a.get("recent_crashes", 0)),
            "last_error": a.get("last_error") or "-",
        }
        for a in top_actors(actors, limit)
    ]
    widths = {c: max([len(c), *(len(str(r[c] or "-")) for r in rows)]) for c in ACTOR_COLUMNS[:-1]}
    head = "  ".join(c.upper().ljust(widths[c]) for c in ACTOR_COLUMNS[:-1]) + "  LAST ERROR"
    lines.append(head)
    for row in rows:
        text = "  ".join(str(row[c] or "-").ljust(widths[c]) for c in ACTOR_COLUMNS[:-1]) + "  " + str(row["last_error"])
        lines.append(_cut(text, width))
    if not rows:
        lines.append("(no live actors: idle ones passivate)")
    elif len(actors) > limit:
        lines.append(f"… {len(actors) - limit} more")
    return lines


def top(ctx: Context) -> int:
    args = ctx.args
    _use_admin_key(ctx)
    interactive = ctx.console.out.isatty() and not ctx.console.as_json
    while True:
        sample = snapshot(ctx)
        if ctx.console.as_json:
            ctx.console.json(sample)
        else:
            size = shutil.get_terminal_size()
            limit = args.limit if args.limit is not None else max(5, size.lines - 12) if interactive else 15
            if interactive:
                ctx.console.out.write("\x1b[H\x1b[2J")  # home and clear: a redrawn screen
            for line in frame(sample, limit, size.columns if interactive else 160):
                ctx.console.line(line)
        if args.once:
            return 0
        if not interactive:
            ctx.console.line()
        time.sleep(args.interval)


def nodes(ctx: Context) -> int:
    _use_admin_key(ctx)
    listed = unwrap(ctx.client.list_admin_nodes())
    ctx.console.table(listed, NODE_COLUMNS, raw=listed)
    return 0


def drain(ctx: Context) -> int:
    _use_admin_key(ctx)
    node = unwrap(ctx.client.admin_node_drain(ctx.args.name, move=ctx.args.move))
    ctx.console.table([node], NODE_COLUMNS, raw=node)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    admin = sub.add_parser("admin", help="operator commands (the admin key: --api-key or CORRAL_ADMIN_KEY)")
    actions = admin.add_subparsers(dest="action", required=True, metavar="ACTION")
    parser = leaf(actions, "top", top, "the node's capacity, load and busiest actors, refreshed every 2 s (Ctrl-C ends)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between frames (default 2)")
    parser.add_argument("--limit", type=int, default=None, help="actors shown (default: what fits the terminal, else 15)")
    leaf(actions, "nodes", nodes, "the cluster's nodes: state (active, draining, lost), region, address, heartbeat")
    drainer = leaf(actions, "drain", drain, "place no new work on a node (until it restarts) and move its sandboxes and computers")
    drainer.add_argument("name", help="the node's name (corral admin nodes)")
    drainer.add_argument("--move", choices=("none", "stopped", "all"), default="stopped",
                         help="what moves to other nodes: nothing, the stopped ones (default), or the running ones too")
