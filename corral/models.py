"""Request models: one frozen dataclass both validates a JSON body and describes it.

A route declares its body once (`@router.post(..., request=ExecRequest)`); the
handler reads it with `await ctx.body(ExecRequest)` and gets a typed, frozen
instance; the OpenAPI document takes the same class's `json_schema`. Fields are
plain annotations, constraints ride along in `Annotated[..., Rule(...)]`::

    @model
    class ExecRequest:
        command: Annotated[str, Rule(description="run under /bin/sh -c")]
        timeout: Annotated[int | None, Rule(minimum=1)] = None
        env: dict[str, str] = field(default_factory=dict)

A field without a default is required: absent, `null` or blank, it is the
specification's `400 MISSING_PARAM` (`"command is required"`), unless the type
admits `None` (then only absence is missing). Every other problem is collected per
field into one `422 VALIDATION_ERROR`, so a client sees all of them at once.
Strings are stripped; unknown keys are ignored, as the specification's examples
expect of a tolerant server.

Why not pydantic or msgspec: the specification's error model is two codes with
per-field messages in its own words (`"must be at most 10"`), every problem at once,
and `MISSING_PARAM` before the rest. msgspec stops at the first error and words it
its own way; pydantic reports everything, but translating its error types back into
the specification's messages and codes is as long as this module, for a large
dependency. The standard library's dataclasses and `typing` introspection give both
the validation and the schema in one small file.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union

from corral.errors import ApiError, invalid_body, missing_param, validation_error
from corral.ids import is_uuid

__all__ = ["UNSET", "Rule", "Unset", "field", "is_model", "json_schema", "missing_first", "model", "parse"]

field = dataclasses.field
T = TypeVar("T")


class Unset:
    """The value of an optional field the body did not mention (a PATCH leaves it alone)."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


@dataclass(frozen=True)
class Rule:
    """Constraints and documentation of one field, for `Annotated`."""

    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    """Strings: characters; lists and objects: entries."""
    allow_empty: bool = False
    """A blank string is a value rather than missing or `must not be empty`."""
    strip: bool = True
    message: str | None = None
    """Replaces the generated message for any problem with this field's value."""
    description: str | None = None
    format: str | None = None
    """OpenAPI only (`uuid`, `email`, `uri`, `date-time`)."""
    schema: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    """Extra OpenAPI keywords merged into the field's schema."""
    parse: Callable[[Any], Any] | None = None
    """Turns a well-typed value into the field's value, raising the field's own
    `ApiError` where its section names one (`400 INVALID_PATH`, `422 INVALID_PORT`)."""
    check: Callable[[Any], str | None] | None = None
    """A further test of a well-typed value: returns the problem, or None."""


@dataclass(frozen=True)
class _Field:
    name: str
    kind: Any
    rule: Rule
    required: bool
    nullable: bool


class _Invalid(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Missing = Callable[[list[str]], ApiError] | Literal["details"]


def missing_first(names: list[str]) -> ApiError:
    """The specification's `400 MISSING_PARAM` for the first absent field."""
    return missing_param(names[0])


@typing.overload
@typing.dataclass_transform(frozen_default=True, kw_only_default=True)
def model(cls: type[T], /) -> type[T]: ...
@typing.overload
@typing.dataclass_transform(frozen_default=True, kw_only_default=True)
def model(*, missing: Missing) -> Callable[[type[T]], type[T]]: ...
@typing.dataclass_transform(frozen_default=True, kw_only_default=True)
def model(cls: type[T] | None = None, /, *, missing: Missing = missing_first) -> Any:
    """Make `cls` a request model: a frozen, keyword-only dataclass.

    `missing` builds the error from the absent required fields, in declaration order;
    the default is the specification's `400 MISSING_PARAM` for the first. Routes whose
    section names its own codes (`MISSING_ROLE`) pass theirs; `"details"` reports absence as `"is required"`
    among the other problems of one `422 VALIDATION_ERROR` (the operator routes).
    """

    def make(cls: type[T]) -> type[T]:
        made = dataclass(frozen=True, kw_only=True)(cls)
        made.__request_model__ = missing  # type: ignore[attr-defined]
        return made

    return make if cls is None else make(cls)


def is_model(cls: object) -> bool:
    return isinstance(cls, type) and hasattr(cls, "__request_model__")


def parse(cls: type[T], body: object) -> T:
    """Validate a decoded JSON body into `cls`, or raise the specification's error."""
    if not isinstance(body, dict):
        raise invalid_body("request body must be a JSON object")
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    missing: list[str] = []
    for spec in _fields(cls):
        present = spec.name in body
        raw = body.get(spec.name)
        if isinstance(raw, str) and spec.rule.strip:
            raw = raw.strip()
        blank = isinstance(raw, str) and not raw.strip() and not spec.rule.allow_empty
        if not present or (raw is None and not spec.nullable) or (blank and spec.required):
            if spec.required:
                missing.append(spec.name)
                errors[spec.name] = "is required"
            continue
        if raw is None:
            values[spec.name] = None
            continue
        try:
            values[spec.name] = _convert(spec.kind, raw, spec.rule)
            problem_text = spec.rule.check(values[spec.name]) if spec.rule.check else None
            if problem_text:
                raise _Invalid(problem_text)
            if spec.rule.parse is not None:
                values[spec.name] = spec.rule.parse(values[spec.name])
        except _Invalid as problem:
            errors[spec.name] = spec.rule.message or problem.message
    report_missing: Missing = cls.__request_model__  # type: ignore[attr-defined]
    if missing and report_missing != "details":
        raise report_missing(missing)
    if errors:
        raise validation_error(errors)
    return cls(**values)


def json_schema(cls: type) -> dict[str, Any]:
    """The OpenAPI 3.1 (JSON Schema) description of a request model."""
    properties = {spec.name: _field_schema(spec) for spec in _fields(cls)}
    for declared in dataclasses.fields(cls):
        if isinstance(declared.default, (str, int, float, bool)) and "default" not in properties[declared.name]:
            properties[declared.name]["default"] = declared.default
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [spec.name for spec in _fields(cls) if spec.required]
    if required:
        schema["required"] = required
    if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
        schema["description"] = cls.__doc__.strip().splitlines()[0]
    return schema


_FIELDS: dict[type, tuple[_Field, ...]] = {}


def _fields(cls: type) -> tuple[_Field, ...]:
    """The declared fields, read once per class (type hints are evaluated lazily, so a
    model may name types defined after it)."""
    if cls not in _FIELDS:
        _FIELDS[cls] = _read_fields(cls)
    return _FIELDS[cls]


def _type_hints(cls: type) -> dict[str, Any]:
    """Each class's own annotations evaluated with its module as the globals.
    `typing.get_type_hints` swaps globals and locals for classes, so a `Rule(check=lambda
    ...)` written under `from __future__ import annotations` would look module names up
    in the class; `inspect.get_annotations` evaluates the way the module reads."""
    hints: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        if base is not object:
            hints.update(inspect.get_annotations(base, eval_str=True))
    return hints


def _read_fields(cls: type) -> tuple[_Field, ...]:
    hints = _type_hints(cls)
    found = []
    for spec in dataclasses.fields(cls):
        kind, rule = _unwrap(hints[spec.name])
        options = _union_members(kind)
        nullable = type(None) in options
        options = [option for option in options if option not in (type(None), Unset)]
        if len(options) == 1 and typing.get_origin(options[0]) is typing.Annotated:  # `Uuid | None`
            options[0], inner = _unwrap(options[0])
            rule = inner if rule == Rule() else rule
        kind = options[0] if len(options) == 1 else Union[tuple(options)]  # noqa: UP007
        required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
        found.append(_Field(spec.name, kind, rule, required, nullable))
    return tuple(found)


def _unwrap(hint: Any) -> tuple[Any, Rule]:
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        rules = [extra for extra in extras if isinstance(extra, Rule)]
        return base, rules[0] if rules else Rule()
    return hint, Rule()


def _union_members(kind: Any) -> list[Any]:
    if typing.get_origin(kind) in (Union, types.UnionType):
        return list(typing.get_args(kind))
    return [kind]


def _convert(kind: Any, raw: object, rule: Rule) -> Any:
    origin = typing.get_origin(kind)
    if kind is Any:
        return raw
    if kind is str:
        if not isinstance(raw, str):
            raise _Invalid("must be a string")
        if not raw.strip() and not rule.allow_empty:
            raise _Invalid("must not be empty")
        if rule.max_length is not None and len(raw) > rule.max_length:
            raise _Invalid(f"must be at most {rule.max_length} characters")
        if rule.format == "uuid" and not is_uuid(raw):
            raise _Invalid("must be a UUID")
        return raw
    if kind is bool:
        if not isinstance(raw, bool):
            raise _Invalid("must be a boolean")
        return raw
    if kind in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float) if kind is float else int):
            raise _Invalid("must be an integer" if kind is int else "must be a number")
        if rule.minimum is not None and raw < rule.minimum:
            raise _Invalid(f"must be at least {_number(rule.minimum)}")
        if rule.maximum is not None and raw > rule.maximum:
            raise _Invalid(f"must be at most {_number(rule.maximum)}")
        return raw
    if origin is Literal:
        choices = typing.get_args(kind)
        if raw not in choices or isinstance(raw, bool):
            raise _Invalid(f"must be one of {', '.join(str(choice) for choice in choices)}")
        return raw
    if origin is list:
        (item,) = typing.get_args(kind) or (Any,)
        if not isinstance(raw, list):
            raise _Invalid(_list_of(item))
        if rule.max_length is not None and len(raw) > rule.max_length:
            raise _Invalid(f"must have at most {rule.max_length} entries")
        try:
            return list(_convert(item, entry, Rule(strip=rule.strip, allow_empty=rule.allow_empty)) for entry in raw)
        except _Invalid as problem:
            raise _Invalid(_list_of(item)) from problem
    if origin is dict or kind is dict:
        _, value = typing.get_args(kind) or (str, Any)
        if not isinstance(raw, dict):
            raise _Invalid(_object_of(value))
        if rule.max_length is not None and len(raw) > rule.max_length:
            raise _Invalid(f"must have at most {rule.max_length} entries")
        if value is not Any and not all(_fits(value, entry) for entry in raw.values()):
            raise _Invalid(_object_of(value))
        return dict(raw)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(kind):
            try:
                return _convert(option, raw, rule)
            except _Invalid:
                continue
        raise _Invalid(f"must be {' or '.join(_noun(option) for option in typing.get_args(kind))}")
    if is_model(kind):
        try:
            return parse(kind, raw)
        except ApiError as problem:
            raise _Invalid(problem.message if not problem.details else "; ".join(f"{k} {v}" for k, v in problem.details.items())) from problem
    raise TypeError(f"request models cannot declare a field of type {kind!r}")


def _fits(kind: Any, value: object) -> bool:
    try:
        _convert(kind, value, Rule(strip=False, allow_empty=True))
    except _Invalid:
        return False
    return True


_NOUNS: dict[Any, tuple[str, str]] = {str: ("a string", "string"), int: ("an integer", "integer"), float: ("a number", "number"), bool: ("a boolean", "boolean")}


def _noun(kind: Any) -> str:
    return _NOUNS.get(kind, ("a value", ""))[0]


def _list_of(kind: Any) -> str:
    adjective = _NOUNS.get(kind, ("", ""))[1]
    return f"must be a list of {adjective}s" if adjective else "must be a list"


def _object_of(kind: Any) -> str:
    adjective = _NOUNS.get(kind, ("", ""))[1]
    return f"must be an object of {adjective} values" if adjective else "must be an object"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _field_schema(spec: _Field) -> dict[str, Any]:
    schema = _type_schema(spec.kind, spec.rule)
    if spec.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if spec.rule.description:
        schema["description"] = spec.rule.description
    if spec.rule.schema:
        schema.update(spec.rule.schema)
    return schema


_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Any: {},
}


def _type_schema(kind: Any, rule: Rule) -> dict[str, Any]:
    origin = typing.get_origin(kind)
    schema: dict[str, Any]
    if kind in _SCALARS:
        schema = dict(_SCALARS[kind])
    elif origin is Literal:
        schema = {"enum": list(typing.get_args(kind))}
    elif origin is list:
        (item,) = typing.get_args(kind) or (Any,)
        schema = {"type": "array", "items": _type_schema(item, Rule())}
    elif origin is dict or kind is dict:
        _, value = typing.get_args(kind) or (str, Any)
        schema = {"type": "object"} if value is Any else {"type": "object", "additionalProperties": _type_schema(value, Rule())}
    elif origin in (Union, types.UnionType):
        schema = {"anyOf": [_type_schema(option, Rule()) for option in typing.get_args(kind)]}
    elif is_model(kind):
        schema = json_schema(kind)
    else:
        raise TypeError(f"request models cannot declare a field of type {kind!r}")
    if schema.get("type") in ("integer", "number"):
        if rule.minimum is not None:
            schema["minimum"] = rule.minimum
        if rule.maximum is not None:
            schema["maximum"] = rule.maximum
    if rule.max_length is not None:
        key = {"string": "maxLength", "array": "maxItems", "object": "maxProperties"}.get(schema.get("type", ""))
        if key:
            schema[key] = rule.max_length
    if rule.format and schema.get("type") == "string":
        schema["format"] = rule.format
    return schema
