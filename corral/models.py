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
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union

from corral.errors import ApiError, invalid_body, missing_param, validation_error
from corral.ids import is_uuid

__all__ = [
    "ABSOLUTE_PATH",
    "NOT_BLANK",
    "UNSET",
    "Rule",
    "Unset",
    "anchored",
    "field",
    "integer_range_pattern",
    "is_model",
    "json_schema",
    "missing_first",
    "model",
    "parse",
]

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
    min_length: int | None = None
    """Strings: characters (after stripping); lists and objects: entries."""
    pattern: str | None = None
    """A regular expression a string must match in full (after stripping). Written in
    the common subset of Python's and ECMA-262's syntax: the OpenAPI document states it
    as the field's `pattern`, anchored."""
    choices: Sequence[str | int] | None = dataclasses.field(default=None, hash=False)
    """The only values allowed (`must be one of ...`); the document's `enum`. For a
    list, of each entry."""
    keys: str | None = None
    """Objects: a regular expression every key must match in full (`propertyNames`)."""
    items: Rule | None = None
    """Lists and objects: the rule of each entry or value (checked entry by entry)."""
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
    error: Callable[[str], ApiError] | None = None
    """The error a refused value of this field raises at once, given the problem, where
    its section names one (`400 INVALID_PARAM`), instead of an entry of the 422."""


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
def model(*, missing: Missing = ..., schema: Mapping[str, Any] | None = ...) -> Callable[[type[T]], type[T]]: ...
@typing.dataclass_transform(frozen_default=True, kw_only_default=True)
def model(cls: type[T] | None = None, /, *, missing: Missing = missing_first, schema: Mapping[str, Any] | None = None) -> Any:
    """Make `cls` a request model: a frozen, keyword-only dataclass.

    `missing` builds the error from the absent required fields, in declaration order;
    the default is the specification's `400 MISSING_PARAM` for the first. Routes whose
    section names its own codes (`MISSING_ROLE`) pass theirs; `"details"` reports absence as `"is required"`
    among the other problems of one `422 VALIDATION_ERROR` (the operator routes).

    `schema` adds keywords to the object's schema: rules across fields that the route
    checks (one of two ids, a field another requires), built from the constants that
    check uses.
    """

    def make(cls: type[T]) -> type[T]:
        made = dataclass(frozen=True, kw_only=True)(cls)
        made.__request_model__ = missing  # type: ignore[attr-defined]
        made.__request_schema__ = dict(schema or {})  # type: ignore[attr-defined]
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
            if spec.rule.error is not None:
                raise spec.rule.error(spec.rule.message or problem.message) from None
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
    rules = [base.__dict__["__request_schema__"] for base in reversed(cls.__mro__) if base.__dict__.get("__request_schema__")]
    if len(rules) == 1:
        schema.update(rules[0])
    elif rules:  # a model's rules and its bases': every one holds
        schema["allOf"] = rules
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
        if rule.min_length is not None and len(raw) < rule.min_length:
            raise _Invalid(f"must be at least {rule.min_length} characters")
        if rule.format == "uuid" and not is_uuid(raw):
            raise _Invalid("must be a UUID")
        if rule.pattern is not None and not _matches(rule.pattern, raw):
            raise _Invalid(f"must match {rule.pattern}")
        _check_choice(raw, rule)
        return raw
    if kind is bool:
        if not isinstance(raw, bool):
            raise _Invalid("must be a boolean")
        return raw
    if kind in (int, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (kind is int and isinstance(raw, float) and not raw.is_integer()):
            raise _Invalid("must be an integer" if kind is int else "must be a number")
        if kind is int:
            raw = int(raw)  # JSON Schema's integers include 2.0
        minimum, maximum = _bounds(kind, rule)
        if minimum is not None and raw < minimum:
            raise _Invalid(f"must be at least {_number(minimum)}")
        if maximum is not None and raw > maximum:
            raise _Invalid(f"must be at most {_number(maximum)}")
        _check_choice(raw, rule)
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
        _check_entries(len(raw), rule)
        if rule.items is not None:
            return [_convert(item, entry, rule.items) for entry in raw]
        try:
            return list(_convert(item, entry, Rule(strip=rule.strip, allow_empty=rule.allow_empty)) for entry in raw)
        except _Invalid as problem:
            raise _Invalid(_list_of(item)) from problem
    if origin is dict or kind is dict:
        _, value = typing.get_args(kind) or (str, Any)
        if not isinstance(raw, dict):
            raise _Invalid(_object_of(value))
        _check_entries(len(raw), rule)
        if value is not Any and not all(_fits(value, entry) for entry in raw.values()):
            raise _Invalid(_object_of(value))
        if rule.keys is not None and not all(_matches(rule.keys, key) for key in raw):
            raise _Invalid(f"keys must match {rule.keys}")
        if rule.items is not None:
            return {key: _convert(value, entry, rule.items) for key, entry in raw.items()}
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


INT64 = (-(2**63), 2**63 - 1)
"""The integers a store column holds: an integer field has these bounds unless it
declares narrower ones."""


def _bounds(kind: Any, rule: Rule) -> tuple[float | None, float | None]:
    if kind is not int:
        return rule.minimum, rule.maximum
    low = INT64[0] if rule.minimum is None else max(rule.minimum, INT64[0])
    high = INT64[1] if rule.maximum is None else min(rule.maximum, INT64[1])
    return low, high


def integer_range_pattern(low: int, high: int) -> str:
    """A regular expression matching exactly the decimal numbers from `low` to `high`
    (0 <= low <= high), without leading zeros: a range stated as a string's `pattern`."""
    if not 0 <= low <= high:
        raise ValueError(f"no pattern for {low}..{high}")
    stops = {high}
    nines = 1
    while low <= (stop := _fill_nines(low, nines)) < high:
        stops.add(stop)
        nines += 1
    zeros = 1
    while low < (stop := _fill_zeros(high + 1, zeros) - 1) <= high:
        stops.add(stop)
        zeros += 1
    parts, start = [], low
    for stop in sorted(stops):
        parts.append(_block_pattern(start, stop))
        start = stop + 1
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _fill_nines(value: int, count: int) -> int:
    text = str(value)
    return int(text[:-count] + "9" * count) if count < len(text) else int("9" * count)


def _fill_zeros(value: int, count: int) -> int:
    return value - value % 10**count


def _block_pattern(start: int, stop: int) -> str:
    """`start`..`stop` of one shape (same length, a shared prefix, then one range, then any digits)."""
    pattern, free = "", 0
    for low_digit, high_digit in zip(str(start), str(stop), strict=True):
        if low_digit == high_digit:
            pattern += low_digit
        elif low_digit == "0" and high_digit == "9":
            free += 1
        else:
            pattern += f"[{low_digit}-{high_digit}]"
    if free:
        pattern += "[0-9]" + (f"{{{free}}}" if free > 1 else "")
    return pattern


def _matches(pattern: str, value: str) -> bool:
    return _compiled(pattern).fullmatch(value) is not None


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _PATTERNS:
        _PATTERNS[pattern] = re.compile(pattern)
    return _PATTERNS[pattern]


def _check_choice(value: object, rule: Rule) -> None:
    if rule.choices is not None and value not in rule.choices:
        raise _Invalid(f"must be one of {', '.join(str(choice) for choice in rule.choices)}")


def _check_entries(count: int, rule: Rule) -> None:
    if rule.max_length is not None and count > rule.max_length:
        raise _Invalid(f"must have at most {rule.max_length} entries")
    if rule.min_length is not None and count < rule.min_length:
        raise _Invalid(f"must have at least {rule.min_length} {'entry' if rule.min_length == 1 else 'entries'}")


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
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if float(value).is_integer() else str(value)


def _field_schema(spec: _Field) -> dict[str, Any]:
    schema = _type_schema(spec.kind, spec.rule)
    if spec.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    if spec.rule.description:
        schema["description"] = spec.rule.description
    if spec.rule.schema:
        schema.update(spec.rule.schema)
    if spec.kind is Any and spec.required and schema.get("type") == "string" and not spec.rule.allow_empty:
        for key, value in _string_schema(spec.rule).items():
            schema.setdefault(key, value)  # a blank one is missing, as for every required field
    return schema


_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    Any: {},
}


ABSOLUTE_PATH = "/[\\s\\S]*"
"""A `Rule.pattern`: a string starting with `/`."""
NO_NUL = "[^\\x00]*"
"""A `Rule.pattern`: a string without NUL (which no command, file name, variable or
keystroke can carry)."""

BLANK = "[\\s\\x1c-\\x1f\\x85]*"
"""What Python's `str.strip` removes entirely, in ECMA-262 syntax."""
NOT_BLANK = "[^\\s\\x1c-\\x1f\\x85]"
"""A character Python's `str.strip` keeps, in ECMA-262 syntax: a string the server would
find blank (and so missing, or `must not be empty`) does not match it."""


def anchored(pattern: str) -> str:
    """`pattern` as a JSON Schema `pattern` that must match the whole string, as `Rule.pattern`
    is checked (`re.fullmatch`)."""
    return f"^(?:{pattern})$"


def _type_schema(kind: Any, rule: Rule) -> dict[str, Any]:
    origin = typing.get_origin(kind)
    schema: dict[str, Any]
    if kind in _SCALARS:
        schema = dict(_SCALARS[kind])
        if kind is str:
            schema.update(_string_schema(rule))
        if rule.choices is not None and kind in (str, int, Any):
            schema["enum"] = list(rule.choices)
    elif origin is Literal:
        schema = {"enum": list(typing.get_args(kind))}
    elif origin is list:
        (item,) = typing.get_args(kind) or (Any,)
        schema = {"type": "array", "items": _type_schema(item, rule.items or Rule(strip=rule.strip, allow_empty=rule.allow_empty))}
    elif origin is dict or kind is dict:
        _, value = typing.get_args(kind) or (str, Any)
        schema = {"type": "object"}
        if value is not Any:
            schema["additionalProperties"] = _type_schema(value, rule.items or Rule(strip=False, allow_empty=True))
        if rule.keys is not None:
            schema["propertyNames"] = {"pattern": anchored(rule.keys)}
    elif origin in (Union, types.UnionType):
        schema = {"anyOf": [_type_schema(option, rule) for option in typing.get_args(kind)]}
    elif is_model(kind):
        schema = json_schema(kind)
    else:
        raise TypeError(f"request models cannot declare a field of type {kind!r}")
    if schema.get("type") in ("integer", "number"):
        minimum, maximum = _bounds(kind, rule)
        if minimum is not None:
            schema["minimum"] = minimum
        if maximum is not None:
            schema["maximum"] = maximum
    if rule.max_length is not None:
        key = {"string": "maxLength", "array": "maxItems", "object": "maxProperties"}.get(schema.get("type", ""))
        if key:
            schema[key] = rule.max_length
    if rule.min_length is not None and schema.get("type") in ("array", "object"):
        schema["minItems" if schema["type"] == "array" else "minProperties"] = rule.min_length
    if rule.format and schema.get("type") == "string":
        schema["format"] = rule.format
    return schema


def _string_schema(rule: Rule) -> dict[str, Any]:
    """What `_convert` asks of a string: not blank (unless `allow_empty`), its lengths, its
    pattern. A stripped field's bounds hold for the string sent, so they are stated of it."""
    schema: dict[str, Any] = {}
    if rule.pattern is not None:
        schema["pattern"] = anchored(rule.pattern)
        if not rule.allow_empty and any(_matches(rule.pattern, blank) for blank in ("", " ", "\t", "\n")):
            schema["not"] = {"pattern": f"^{BLANK}$"}
    elif not rule.allow_empty:
        schema["pattern"] = NOT_BLANK
    minimum = max(rule.min_length or 0, 0 if rule.allow_empty else 1)
    if minimum:
        schema["minLength"] = minimum
    return schema
