"""Generate `corral/client/_generated.py` from the OpenAPI document: one typed method per
operation, in a sync and an async class.

The document comes from the route table itself (`corral.http.api_document`), so no
server is needed and a route cannot exist without its client method;
`tests/client/test_generated.py` fails when the file is out of date. Run it after
adding or changing routes:

    python tools/gen_client.py            # rewrite the file
    python tools/gen_client.py --check    # exit 1 when it is out of date

Method names are mechanical, from the path below `/api/v1` (parameters left out,
hyphens as underscores, a collection's name in the singular before its id):

    GET    /sandboxes                      list_sandboxes         (a GET of a collection)
    POST   /sandboxes                      create_sandbox         (a POST to a collection)
    GET    /sandboxes/{id}                 get_sandbox
    PATCH  /computers/{id}                 update_computer
    PUT    /sandboxes/{id}/env             set_sandbox_env
    DELETE /sandboxes/{id}                 delete_sandbox
    POST   /sandboxes/{id}/stop            sandbox_stop           (an action)
    GET    /sandboxes/{id}/events (SSE)    stream_sandbox_events  (returns an event stream)

A collection is a path that also exists with `/{param}` after it, or, for a POST,
one whose last word is a plural. Two operations that would get the same name keep
their whole path in it; a name still taken twice is an error here.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as `python tools/gen_client.py`: this checkout's corral, not an installed one
    sys.path.insert(0, str(ROOT))

from corral.http import api_document  # noqa: E402 - after the path is set

TARGET = ROOT / "corral" / "client" / "_generated.py"
PREFIX = "/api/v1"
VERBS = {"GET": "get", "PUT": "set", "PATCH": "update", "DELETE": "delete", "POST": ""}


@dataclass
class Param:
    name: str
    """The Python name."""
    wire: str
    """The name on the wire."""
    annotation: str
    required: bool
    description: str = ""


@dataclass
class Operation:
    method: str
    path: str
    summary: str
    auth_text: str
    expect: str
    sse: bool
    idempotent: bool
    path_params: list[Param] = field(default_factory=list)
    query: list[Param] = field(default_factory=list)
    body: list[Param] | None = None
    name: str = ""


def singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    return word


def _segments(path: str) -> list[tuple[str, bool]]:
    """(segment, is_parameter) below /api/v1."""
    return [(part.strip("{}"), part.startswith("{")) for part in path[len(PREFIX) :].strip("/").split("/") if part]


def _words(path: str, *, singular_last: bool = False) -> list[str]:
    parts = _segments(path)
    words: list[str] = []
    for index, (part, is_param) in enumerate(parts):
        if is_param:
            continue
        followed_by_param = index + 1 < len(parts) and parts[index + 1][1]
        last = index == len(parts) - 1
        word = part.replace("-", "_")
        words.append(singular(word) if followed_by_param or (last and singular_last) else word)
    return words


def preferred_name(op: Operation, collections: set[str]) -> str:
    segments = _segments(op.path)
    ends_with_param = bool(segments) and segments[-1][1]
    is_collection = op.path in collections
    if op.sse:
        words = _words(op.path)
        if words[-1] == "stream":
            words = words[:-1]
        return "stream_" + "_".join(words)
    if op.method == "GET" and is_collection and not ends_with_param:
        return "list_" + "_".join(_words(op.path))
    plural = singular(segments[-1][0]) != segments[-1][0]
    if op.method == "POST" and not ends_with_param and (is_collection or plural):
        return "create_" + "_".join(_words(op.path, singular_last=True))
    verb = VERBS[op.method]
    words = _words(op.path)
    return "_".join([verb, *words]) if verb else "_".join(words)


def full_name(op: Operation) -> str:
    """The name of an operation whose preferred name is taken twice: every word of its path."""
    verb = "stream" if op.sse else VERBS[op.method] or "post"
    return "_".join([verb, *_words(op.path)])


def py_name(wire: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", wire).lower()
    if keyword.iskeyword(name) or name in taken or name in {"self", "request_timeout", "idempotency_key"}:
        name += "_"
    return name


def annotation(schema: dict[str, Any]) -> str:
    """A Python annotation for a JSON schema (the shapes corral.models produces)."""
    if "anyOf" in schema or "oneOf" in schema:
        options = [annotation(option) for option in schema.get("anyOf", schema.get("oneOf", []))]
        unique: list[str] = []
        for option in options:
            for part in option.split(" | "):
                if part not in unique:
                    unique.append(part)
        if "None" in unique:
            unique.remove("None")
            unique.append("None")
        return " | ".join(unique)
    if "enum" in schema:
        values = schema["enum"]
        if all(isinstance(value, str) for value in values):
            return "Literal[" + ", ".join(repr(value) for value in values) + "]"
        return "Any"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(annotation({**schema, "type": one}) for one in kind)
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{annotation(schema.get('items') or {})}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"dict[str, {annotation(extra)}]"
        return "dict[str, Any]"
    return "Any"


def expect_of(responses: dict[str, Any]) -> tuple[str, bool]:
    """("json" | "bytes" | "text" | "none", is_sse) from the success response."""
    for status, response in responses.items():
        if status == "default":
            continue
        content = response.get("content") or {}
        if not content:
            return "none", False
        media = next(iter(content))
        if media == "text/event-stream":
            return "json", True
        if media == "application/json":
            return "json", False
        if media.startswith("text/"):
            return "text", False
        return "bytes", False
    return "json", False


def operations(document: dict[str, Any]) -> list[Operation]:
    found: list[Operation] = []
    for path, item in document["paths"].items():
        if not path.startswith(PREFIX + "/"):
            continue  # browser pages (invite landing pages), not API operations
        for method, op in item.items():
            if "101" in op.get("responses", {}):
                continue  # a WebSocket: see corral.client.terminal and the egress tail
            expect, sse = expect_of(op["responses"])
            operation = Operation(
                method=method.upper(),
                path=path,
                summary=op.get("summary", ""),
                auth_text=op.get("description", ""),
                expect=expect,
                sse=sse,
                idempotent=any(p["in"] == "header" and p["name"].lower() == "idempotency-key" for p in op.get("parameters", [])),
            )
            taken: set[str] = set()
            for parameter in op.get("parameters", []):
                if parameter["in"] == "path":
                    param = Param(py_name(parameter["name"], taken), parameter["name"], "str", True)
                    operation.path_params.append(param)
                    taken.add(param.name)
            for parameter in op.get("parameters", []):
                if parameter["in"] == "query" and parameter["name"] != "ticket":
                    param = Param(
                        py_name(parameter["name"], taken),
                        parameter["name"],
                        "str | int | None",
                        False,
                        parameter.get("description", ""),
                    )
                    operation.query.append(param)
                    taken.add(param.name)
            body = op.get("requestBody")
            if body is not None:
                schema = body["content"]["application/json"]["schema"]
                required = set(schema.get("required", []))
                operation.body = []
                for wire, prop in schema.get("properties", {}).items():
                    param = Param(py_name(wire, taken), wire, annotation(prop), wire in required, prop.get("description", ""))
                    operation.body.append(param)
                    taken.add(param.name)
            found.append(operation)
    return found


def assign_names(ops: list[Operation]) -> None:
    paths = {op.path for op in ops}
    collections = {path for path in paths if any(other.startswith(path + "/{") for other in paths)}
    preferred = {id(op): preferred_name(op, collections) for op in ops}
    counts: dict[str, int] = {}
    for name in preferred.values():
        counts[name] = counts.get(name, 0) + 1
    seen: dict[str, Operation] = {}
    for op in ops:
        name = preferred[id(op)]
        op.name = name if counts[name] == 1 else full_name(op)
        if op.name in seen:
            other = seen[op.name]
            raise SystemExit(f"gen_client: {op.method} {op.path} and {other.method} {other.path} both map to {op.name}")
        seen[op.name] = op


def _doc(op: Operation) -> list[str]:
    summary = op.summary.rstrip(".").replace("\\", "/").replace('"', "'")
    lines = [f"{summary}.", "", f"`{op.method} {op.path}`. {op.auth_text.replace(chr(92), '/')}"]
    if op.sse:
        lines.append("Returns the stream's events; `last_event_id` resumes after an event, `ticket` authenticates with a fresh SSE ticket.")
    if op.idempotent:
        lines.append("Sends an `Idempotency-Key` (a fresh one unless `idempotency_key` is given); retries reuse it.")
    return lines


def render_method(op: Operation, asynchronous: bool) -> str:
    signature = ["self"]
    signature += [f"{p.name}: str" for p in op.path_params]
    keyword_only: list[str] = []
    body = op.body or []
    for p in body:
        if p.required:
            keyword_only.append(f"{p.name}: {p.annotation}")
    for p in body:
        if not p.required:
            optional = p.annotation[: -len(" | None")] + " | Unset | None" if p.annotation.endswith(" | None") else p.annotation + " | Unset"
            keyword_only.append(f"{p.name}: {optional} = UNSET")
    for p in op.query:
        keyword_only.append(f"{p.name}: {p.annotation} = None")
    if op.sse:
        keyword_only += ["last_event_id: str | None = None", "ticket: bool = False"]
    else:
        if op.idempotent:
            keyword_only.append("idempotency_key: str | None = None")
        keyword_only.append("request_timeout: float | None = None")
    if keyword_only:
        signature += ["*", *keyword_only]
    if op.sse:
        returns = "AsyncEventStream" if asynchronous else "EventStream"
    elif op.expect == "none":
        returns = "None"
    elif op.expect == "bytes":
        returns = "bytes"
    elif op.expect == "text":
        returns = "str"
    else:
        returns = "Any"
    prefix = "async def" if asynchronous and not op.sse else "def"
    out = [f"    {prefix} {op.name}({', '.join(signature)}) -> {returns}:"]
    doc = _doc(op)
    out.append('        """' + doc[0])
    out += [f"        {line}" if line else "" for line in doc[1:]]
    out.append('        """')
    args = [repr(op.path)]
    if op.path_params:
        args.append("path={" + ", ".join(f"{p.wire!r}: {p.name}" for p in op.path_params) + "}")
    if op.query:
        args.append("query={" + ", ".join(f"{p.wire!r}: {p.name}" for p in op.query) + "}")
    if op.sse:
        args += ["last_event_id=last_event_id", "ticket=ticket"]
        out.append(f"        return self._events({', '.join(args)})")
        return "\n".join(out)
    args.insert(0, repr(op.method))
    if op.body is not None:
        args.append("body={" + ", ".join(f"{p.wire!r}: {p.name}" for p in body) + "}")
    if op.idempotent:
        args += ["idempotent=True", "idempotency_key=idempotency_key"]
    if op.expect != "json":
        args.append(f"expect={op.expect!r}")
    args.append("request_timeout=request_timeout")
    call = f"self._call({', '.join(args)})"
    if asynchronous:
        call = "await " + call
    out.append(f"        return {call}" if returns != "None" else f"        {call}")
    return "\n".join(out)


HEADER = '''"""Generated by tools/gen_client.py from the OpenAPI document: do not edit.

One method per operation of the API, in `Operations` (blocking) and
`AsyncOperations`; `corral.client.Client` and `AsyncClient` add the helpers.
JSON replies are returned as the server sends them (`{{"data": ...}}` where the API
wraps), downloads as bytes, streams as `EventStream`s.
"""

from __future__ import annotations

from typing import {typing_names}

from ._base import AsyncBase, AsyncEventStream, EventStream, SyncBase
from ._types import UNSET, Unset

__all__ = ["OPERATIONS", "AsyncOperations", "Operations"]

OPERATIONS: dict[str, tuple[str, str]] = {{
{table}
}}
"""Method name -> (HTTP method, path): what the client covers, for tests and tools."""
'''


def render(document: dict[str, Any]) -> str:
    ops = operations(document)
    assign_names(ops)
    ops.sort(key=lambda op: op.name)
    table = "\n".join(f"    {op.name!r}: ({op.method!r}, {op.path!r})," for op in ops)
    methods = [render_method(op, False) for op in ops] + [render_method(op, True) for op in ops]
    typing_names = "Any, Literal" if any("Literal[" in method for method in methods) else "Any"
    parts = [HEADER.format(table=table, typing_names=typing_names)]
    parts.append('\nclass Operations(SyncBase):\n    """Every operation of the API, blocking."""\n')
    parts += [method + "\n" for method in methods[: len(ops)]]
    parts.append('\nclass AsyncOperations(AsyncBase):\n    """Every operation of the API, async (trio or asyncio)."""\n')
    parts += [method + "\n" for method in methods[len(ops) :]]
    return "\n".join(parts)


def generate() -> str:
    return render(api_document())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    source = generate()
    current = TARGET.read_text() if TARGET.exists() else ""
    if args.check:
        if current != source:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python tools/gen_client.py", file=sys.stderr)
            return 1
        return 0
    if current != source:
        TARGET.write_text(source)
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
