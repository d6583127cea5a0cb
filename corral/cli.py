"""The `corral` command: `corral serve`, and operator helpers."""

from __future__ import annotations

import argparse
import os
import signal
import sys

import trio

from corral import commands
from corral.config import Settings, SettingsError
from corral.net.edge import EdgeConfig, caddy_binary, edge_config, run_edge_process

LOG_HELP = (
    "debug, info, warning, error or critical (wins over CORRAL_LOG_LEVEL; default info);"
    " CORRAL_LOG_FORMAT=json writes one JSON object a line"
)


def _setup_logging(level_option: str | None) -> bool:
    """The node's log handler (`corral.operations.logs`); False, said on stderr, if the
    level or `CORRAL_LOG_FORMAT` is not one we know."""
    from corral.operations.logs import LogSettingsError, configure

    try:
        configure(level_option)
    except LogSettingsError as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return False
    return True


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the API server (options also read from CORRAL_* variables)")
    serve.add_argument("--host", default=None, help="listen address (CORRAL_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="API port (CORRAL_PORT, default 8080)")
    serve.add_argument("--data-dir", default=None, help="data directory (CORRAL_DATA_DIR, default ./.corral)")
    serve.add_argument(
        "--database-url", default=None, help="sqlite:///path or postgresql://... (CORRAL_DATABASE_URL)"
    )
    serve.add_argument("--preview-port", type=int, default=None, help="preview router port (CORRAL_PREVIEW_PORT, default 8081)")
    serve.add_argument("--public-domain", default=None, help="service domain (CORRAL_PUBLIC_DOMAIN, default corral.localhost)")
    serve.add_argument("--node-name", default=None, help="this node's name in the cluster (CORRAL_NODE_NAME, default: the host name)")
    serve.add_argument(
        "--advertise", default=None, metavar="URL",
        help="where the other nodes reach this one (CORRAL_ADVERTISE_URL, default http://HOST:PORT)",
    )
    serve.add_argument(
        "--advertise-preview", default=None, metavar="URL",
        help="where the other nodes' preview routers reach this one's (CORRAL_ADVERTISE_PREVIEW_URL,"
        " default http://<the --advertise host>:PREVIEW_PORT)",
    )
    serve.add_argument("--metrics-port", type=int, default=None, help="Prometheus metrics port, GET /metrics without authentication (CORRAL_METRICS_PORT, default: none)")
    serve.add_argument("--log-level", default=None, help=LOG_HELP)
    serve.add_argument("--edge", action="store_true", help="also run the TLS edge (Caddy) in front of the preview router")
    _edge_ports(serve)


def _edge_ports(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--https-port", type=int, default=None, help="the edge's HTTPS port (CORRAL_EDGE_HTTPS_PORT, default 443)")
    parser.add_argument("--http-port", type=int, default=None, help="the edge's HTTP port: ACME challenges, redirects (CORRAL_EDGE_HTTP_PORT, default 80)")


def _edge_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    edge = sub.add_parser(
        "edge",
        help="run the TLS edge: Caddy with on-demand certificates in front of a node's preview router"
        " (CORRAL_ACME_CA: empty for Let's Encrypt, `internal`, or an ACME directory URL)",
    )
    edge.add_argument("--host", default=None, help="the node's listen address (CORRAL_HOST, default 127.0.0.1)")
    edge.add_argument("--port", type=int, default=None, help="the node's API port, asked by /tls/ask (CORRAL_PORT, default 8080)")
    edge.add_argument("--preview-port", type=int, default=None, help="the node's preview router port (CORRAL_PREVIEW_PORT, default 8081)")
    edge.add_argument("--data-dir", default=None, help="the node's data directory: the edge's secret and certificates (CORRAL_DATA_DIR)")
    _edge_ports(edge)
    edge.add_argument("--log-level", default=None, help=LOG_HELP)


def _templates_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    templates = sub.add_parser("templates", help="instance templates")
    actions = templates.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="build (or rebuild) a template from Debian's packages")
    build.add_argument("name", help="template name, e.g. default")
    build.add_argument("--data-dir", default=None, help="data directory (CORRAL_DATA_DIR, default ./.corral)")
    build.add_argument("--template-dir", default=None, help="where templates live (CORRAL_TEMPLATE_DIR)")
    build.add_argument(
        "--if-missing", action="store_true",
        help="only when it is not built yet (waits for a build a running server has under way); tools/serve uses it",
    )
    actions.add_parser("list", help="known templates and whether they are built")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="corral", description="Corral compute platform")
    sub = parser.add_subparsers(dest="subcommand", required=True)  # not `command`: options such as `agent-runs create --command` use that name
    _serve_parser(sub)
    _templates_parser(sub)
    _edge_parser(sub)
    commands.register(sub, parser)
    return parser


def templates_command(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `corral --help` and `corral serve` should not pay
    # for the template tooling, nor `corral templates` for the whole server.
    from pathlib import Path

    from corral.progress import TEMPLATE_STAGES, StageProgress
    from corral.vm import TemplateStore, known_templates
    from corral.vm.errors import RuntimeErrorBase

    settings = Settings.from_env(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        template_dir=Path(args.template_dir) if getattr(args, "template_dir", None) else None,
    )
    assert settings.template_dir is not None
    store = TemplateStore(settings.template_dir)
    if args.action == "list":
        for name in known_templates():
            state = "built" if store.is_built(name) else "not built"
            print(f"{name}\t{state}\t{store.rootfs(name)}")
        return 0
    if args.if_missing and store.is_built(args.name):
        print(f"template {args.name} is built at {store.rootfs(args.name)}")
        return 0
    progress = StageProgress(f"template {args.name}", TEMPLATE_STAGES)
    try:
        from corral.vm import build_template

        if args.if_missing:  # under the store's lock, as a server's first create builds it
            path = store.ensure_sync(args.name, progress).parent
        else:
            path = build_template(args.name, store.template_dir(args.name), progress, store.uid_base)
    except RuntimeErrorBase as exc:
        progress.finish()
        print(f"corral: {exc}", file=sys.stderr)
        return 1
    progress.finish()
    print(f"template {args.name} built at {path}")
    return 0


def _settings_error(exc: BaseException) -> SettingsError | None:
    """`exc` if it is a `SettingsError`, else the first one in its exception group."""
    if isinstance(exc, SettingsError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _settings_error(inner)
            if found is not None:
                return found
    return None


def main(argv: list[str] | None = None) -> int:
    args = commands.parse(build_parser(), sys.argv[1:] if argv is None else argv)
    if args.subcommand == "serve":
        if args.node_name:  # the logs' and traces' `node` too (they read the variable)
            os.environ["CORRAL_NODE_NAME"] = args.node_name
        if not _setup_logging(args.log_level):
            return 2
        from corral.http.server import serve
        from corral.operations import tracing

        try:
            settings = Settings.from_args(args)
        except ValueError as exc:  # SettingsError, or a number that is not one
            print(f"corral: {exc}", file=sys.stderr)
            return 2
        provider = tracing.configure()  # OTLP export only when OTEL_EXPORTER_OTLP_ENDPOINT is set
        try:
            trio.run(serve, settings, args.edge)
        except (SettingsError, BaseExceptionGroup) as exc:
            # Found while starting (a configuration file that cannot be used, a second
            # node on a SQLite store), perhaps inside the node's task group.
            found = _settings_error(exc)
            if found is None:
                raise
            print(f"corral: {found}", file=sys.stderr)
            return 2
        finally:
            tracing.shutdown(provider)
        return 0
    if args.subcommand == "templates":
        return templates_command(args)
    if args.subcommand == "edge":
        return edge_command(args)
    if args.subcommand in commands.CLIENT_COMMANDS:
        return commands.run(args)
    return 2


def _edge_settings(args: argparse.Namespace) -> Settings:
    from pathlib import Path

    return Settings.from_env(
        host=args.host,
        port=args.port,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        preview_port=args.preview_port,
        edge_https_port=args.https_port,
        edge_http_port=args.http_port,
    )


def edge_command(args: argparse.Namespace) -> int:
    """`corral edge`: Caddy in front of a node started separately (same data directory)."""

    if not _setup_logging(args.log_level):
        return 2
    try:
        config = edge_config(_edge_settings(args))
        caddy_binary()
    except (FileNotFoundError, ValueError) as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return 2
    trio.run(_run_edge_until_signalled, config)
    return 0


async def _run_edge_until_signalled(config: EdgeConfig) -> None:
    """Caddy until SIGTERM or SIGINT; then Caddy is stopped too (never left running alone)."""
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await nursery.start(run_edge_process, config)
            async for _ in signals:
                break
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    sys.exit(main())
