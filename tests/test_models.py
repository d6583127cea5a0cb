"""Request models: validation in the specification's words, and the schema from the same class."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest

from corral.errors import ApiError
from corral.models import NOT_BLANK, UNSET, Rule, Unset, field, json_schema, model, parse


@model
class Exec:
    """Run a command."""

    command: Annotated[str, Rule(max_length=10)]
    timeout: Annotated[int | None, Rule(minimum=1, maximum=300)] = None
    size: Literal["small", "large"] = "small"
    env: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    note: str | Unset = UNSET
    session: Annotated[str | None, Rule(check=lambda v: None if v.startswith("s") else "must start with s")] = None
    metadata: dict[str, Any] = field(default_factory=dict)


def error(body: object, cls: type = Exec) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(cls, body)
    return caught.value


def test_a_valid_body_becomes_a_frozen_typed_instance() -> None:
    parsed = parse(Exec, {"command": "  ls  ", "timeout": 5, "env": {"A": "1"}, "tags": ["x"], "unknown": 1})
    assert (parsed.command, parsed.timeout, parsed.env, parsed.tags, parsed.size) == ("ls", 5, {"A": "1"}, ["x"], "small")
    assert parsed.note is UNSET
    with pytest.raises(AttributeError):
        parsed.command = "rm"  # type: ignore[misc]


@pytest.mark.parametrize("body", [{}, {"command": None}, {"command": "   "}])
def test_an_absent_null_or_blank_required_field_is_missing_param(body: dict[str, Any]) -> None:
    problem = error(body)
    assert (problem.status, problem.code, problem.message) == (400, "MISSING_PARAM", "command is required")


def test_every_other_problem_is_reported_at_once() -> None:
    problem = error({"command": "x" * 11, "timeout": 301, "size": "huge", "env": {"A": 1}, "tags": "x", "session": "t", "metadata": []})
    assert (problem.status, problem.code) == (422, "VALIDATION_ERROR")
    assert problem.details == {
        "command": "must be at most 10 characters",
        "timeout": "must be at most 300",
        "size": "must be one of small, large",
        "env": "must be an object of string values",
        "tags": "must be a list of strings",
        "session": "must start with s",
        "metadata": "must be an object",
    }


@pytest.mark.parametrize(("timeout", "message"), [(0, "must be at least 1"), (True, "must be an integer"), ("5", "must be an integer")])
def test_integers_are_integers_within_bounds(timeout: object, message: str) -> None:
    assert error({"command": "ls", "timeout": timeout}).details == {"timeout": message}


def test_a_nullable_field_accepts_null_and_a_body_must_be_an_object() -> None:
    assert parse(Exec, {"command": "ls", "timeout": None}).timeout is None
    problem = error([1, 2])
    assert (problem.status, problem.code) == (400, "INVALID_BODY")


def test_a_model_may_name_its_own_missing_error() -> None:
    @model(missing=lambda names: ApiError(422, f"MISSING_{names[0].upper()}", f"{names[0]} is required"))
    class Role:
        role: Literal["admin", "viewer"]

    assert error({}, Role).code == "MISSING_ROLE"


def test_the_schema_comes_from_the_same_declaration() -> None:
    schema = json_schema(Exec)
    assert schema["required"] == ["command"]
    assert schema["description"] == "Run a command."
    properties = schema["properties"]
    assert properties["command"] == {"type": "string", "pattern": NOT_BLANK, "minLength": 1, "maxLength": 10}
    assert properties["timeout"] == {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 300}, {"type": "null"}]}
    assert properties["size"] == {"enum": ["small", "large"], "default": "small"}
    assert properties["env"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert properties["tags"] == {"type": "array", "items": {"type": "string", "pattern": NOT_BLANK, "minLength": 1}}
    assert properties["note"] == {"type": "string", "pattern": NOT_BLANK, "minLength": 1}


@model
class Declared:
    slug: Annotated[str, Rule(pattern=r"[a-z][a-z0-9-]{0,9}")]
    kind: Annotated[str, Rule(choices=("tcp", "udp"))] = "tcp"
    env: Annotated[dict[str, str], Rule(keys=r"[A-Z][A-Z0-9_]*")] = field(default_factory=dict)
    names: Annotated[list[str], Rule(min_length=1, items=Rule(pattern=r"[a-z]+"))] = field(default_factory=lambda: ["a"])
    label: Annotated[str, Rule(allow_empty=True)] = ""


def test_patterns_choices_and_keys_are_checked_and_stated() -> None:
    assert parse(Declared, {"slug": "web-1", "kind": "udp", "env": {"A_1": "x"}, "names": ["ab"], "label": ""}).kind == "udp"
    problem = error({"slug": "Web 1", "kind": "icmp", "env": {"a": "x"}, "names": [], "label": 1}, Declared)
    assert problem.details == {
        "slug": "must match [a-z][a-z0-9-]{0,9}",
        "kind": "must be one of tcp, udp",
        "env": "keys must match [A-Z][A-Z0-9_]*",
        "names": "must have at least 1 entry",
        "label": "must be a string",
    }
    assert error({"slug": "web", "names": ["ok", "NO"]}, Declared).details == {"names": "must match [a-z]+"}
    properties = json_schema(Declared)["properties"]
    assert properties["slug"] == {"type": "string", "pattern": "^(?:[a-z][a-z0-9-]{0,9})$", "minLength": 1}
    assert properties["kind"] == {"type": "string", "pattern": NOT_BLANK, "minLength": 1, "enum": ["tcp", "udp"], "default": "tcp"}
    assert properties["env"] == {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": "^(?:[A-Z][A-Z0-9_]*)$"}}
    assert properties["names"] == {"type": "array", "items": {"type": "string", "pattern": "^(?:[a-z]+)$", "minLength": 1}, "minItems": 1}
    assert properties["label"] == {"type": "string", "default": ""}


@pytest.mark.parametrize("blank", ["", " ", "\t\n", "\x1c", "\x85", "\u3000", "\u2028"])
def test_a_string_the_server_finds_blank_does_not_match_the_stated_pattern(blank: str) -> None:
    import re

    assert blank.strip() == ""
    assert re.search(NOT_BLANK, blank) is None
    assert error({"command": blank}).code == "MISSING_PARAM"
    assert re.search(NOT_BLANK, f"{blank}x{blank}") is not None


SESSION_PREFIX = "s-"


@model
class Session:
    name: Annotated[str, Rule(check=lambda v: None if v.startswith(SESSION_PREFIX) else "must start with s-")]


@model
class NamedSession(Session):
    label: str | None = None


def test_a_check_sees_the_names_of_its_module_and_fields_are_inherited() -> None:
    """Annotations are strings here (`from __future__ import annotations`): a check that
    names a module constant must still find it, also through a subclass."""
    assert parse(NamedSession, {"name": "s-1", "label": "x"}) == NamedSession(name="s-1", label="x")
    assert error({"name": "t"}, NamedSession).details == {"name": "must start with s-"}
