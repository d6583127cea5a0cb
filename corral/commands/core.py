"""`corral login`, `logout`, `whoami`: where the CLI's credential comes from."""

from __future__ import annotations

import argparse
import getpass
import socket

from corral.client import Client, config_path, load_credentials, save_credentials, unwrap

from .context import Context, leaf

__all__ = ["register"]


def login(ctx: Context) -> int:
    """Store a key and URL in the config file: the given key once the server accepts it,
    or a new key made with an email and password (the password is not stored)."""
    args = ctx.args
    url = (args.url or ctx.env.get("CORRAL_API_URL") or load_credentials(env=ctx.env).url).rstrip("/")
    key = args.api_key or (None if args.email else ctx.env.get("CORRAL_API_KEY"))
    if key is None:
        try:
            email = args.email or input("email: ")
        except EOFError:
            raise ValueError("no email given: use --email and --password, or --api-key") from None
        password = args.password or ctx.env.get("CORRAL_PASSWORD") or getpass.getpass("password: ")
        with Client(url, None) as anonymous:
            session = anonymous.auth_login(email=email, password=password)
        with Client(url, session["token"]) as user:
            made = unwrap(user.create_api_key(name=f"corral cli on {socket.gethostname()}"[:100]))
        key = made["key"]
    with Client(url, key) as client:
        tenant = unwrap(client.get_tenant())
    path = save_credentials(url, key, ctx.env)
    if ctx.console.as_json:
        ctx.console.json({"url": url, "tenant": tenant, "config": str(path)})
    else:
        ctx.console.line(f"logged in to {url} as tenant {tenant.get('name')} ({tenant.get('id')}); saved in {path}")
    return 0


def logout(ctx: Context) -> int:
    path = config_path(ctx.env)
    path.unlink(missing_ok=True)
    ctx.console.line(f"removed {path}")
    return 0


def whoami(ctx: Context) -> int:
    credentials = load_credentials(ctx.args.url, ctx.args.api_key, ctx.env)
    tenant = unwrap(ctx.client.get_tenant())
    ctx.console.record({"url": credentials.url, "credential_from": credentials.source, "tenant": tenant.get("name"), "tenant_id": tenant.get("id")}, raw=tenant)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = leaf(sub, "login", login, "store an API key and URL in ~/.config/corral (or make a key from an email and password)")
    parser.add_argument("--email", default=None)
    parser.add_argument("--password", default=None, help="asked for when omitted (or CORRAL_PASSWORD)")
    leaf(sub, "logout", logout, "forget the stored key")
    leaf(sub, "whoami", whoami, "the server, the tenant, and where the key came from")
