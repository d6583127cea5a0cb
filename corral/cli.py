"""The `corral` command: `corral serve`, and operator helpers."""

from __future__ import annotations

import argparse
import logging
import sys

import trio

from corral.config import Settings


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
    serve.add_argument("--log-level", default="INFO")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="corral", description="Corral compute platform")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from corral.http.server import serve

        trio.run(serve, Settings.from_args(args))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
