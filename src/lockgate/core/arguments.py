"""Argument schemas of tasks: checked at enqueue, rebuilt to their types in the worker.

The rule: a task receives exactly what was enqueued, the same values of the same types.
JSON has no dates, decimals, UUIDs, bytes, tuples, enums or records, so a parameter's
type annotation says how to rebuild them from their JSON form (``msgspec.convert``); a
value its parameter cannot rebuild is refused at enqueue, where the caller can fix it,
instead of arriving in the task as a string. Parameters without an annotation (or
annotated ``Any`` or ``object``) are not converted: they take JSON-native values only
(``str``, ``int``, finite ``float``, ``bool``, ``None``, and lists and ``str``-keyed dicts
of those).

Two errors, by whose fault it is:

- :class:`~lockgate.errors.InvalidArguments`: the arguments do not bind to the signature,
  or a value does not fit its annotation (msgspec rejects it or would change it: ``"5"``
  for an ``int``, a string for a ``date``, a tuple for a ``list[int]``).
- :class:`~lockgate.errors.SerializationError`: a value that fits cannot make the trip: it
  has no JSON form, nests deeper than :data:`~lockgate.core.codec.MAX_DEPTH`, or its JSON form
  would arrive as another value or type (a ``date`` for an unannotated parameter, NaN, a
  dict with ``int`` keys, a ``datetime`` in a ``ZoneInfo`` zone).

The per-value checks are decided once per task at declaration: a value of a plain JSON
type for a parameter annotated with that type (or not at all) costs one set lookup.
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from math import isfinite
from typing import Any
from uuid import UUID

import msgspec

from lockgate.core.codec import MAX_DEPTH, depth_within, nesting_depth
from lockgate.core.logs import get_logger
from lockgate.core.records import convert, enc_hook, record_fields
from lockgate.errors import InvalidArguments, SerializationError

log = get_logger(__name__)

NoneType = type(None)
# The scalars JSON keeps as they are (a float only when finite: NaN and infinities
# become null).
_JSON_SCALARS: frozenset[type] = frozenset({str, int, bool, NoneType, float})
_JSON_KINDS = _JSON_SCALARS | {list, dict}
_STR_ONLY = frozenset({str})
# Types whose every value comes back as itself from its JSON string under an annotation
# of exactly that type (not datetime: its zone may not survive; not in a union with
# other types: "5" could come back as an int).
_SELF_RESTORING: frozenset[type] = frozenset({date, Decimal, UUID, bytes})

_encoder = msgspec.json.Encoder(enc_hook=enc_hook)
_decoder = msgspec.json.Decoder()
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 120


@dataclasses.dataclass(frozen=True, slots=True)
class Parameter:
    """One parameter of a task, as its arguments are checked and converted.

    Attributes:
        name: the parameter's name.
        kind: positional, keyword, ``*args`` or ``**kwargs``.
        annotation: the type its values are converted to (for ``*args`` and ``**kwargs``
            the type of each item), or None: not converted, JSON-native values only.
        accept: types whose values pass enqueue without the round-trip check.
        finite_float: a finite float also passes without it.
        keep: types whose values the worker passes on without converting them.
    """

    name: str
    kind: inspect._ParameterKind
    annotation: Any
    accept: frozenset[type]
    finite_float: bool
    keep: frozenset[type]

    @property
    def type_name(self) -> str:
        """The annotation as written in messages."""
        return "no annotation" if self.annotation is None else _type_name(self.annotation)


class Schema:
    """The argument schema of one task: binds, checks and converts its arguments.

    Args:
        task: the task's name (for messages).
        fn: the task function; its annotations are resolved with
            ``typing.get_type_hints`` (string annotations included). When they cannot be
            resolved, its arguments are not converted (a warning is logged).
        signature: ``inspect.signature(fn)``.
    """

    def __init__(self, task: str, fn: Callable[..., Any], signature: inspect.Signature) -> None:
        self.task = task
        self.signature = signature
        hints = _type_hints(task, fn)
        self.parameters = tuple(
            _parameter(task, p, hints.get(p.name, Any)) for p in signature.parameters.values()
        )
        self._by_name = {p.name: p for p in self.parameters}
        # Flat copies for the enqueue fast path: one set lookup per plain value.
        self._accepts = tuple(p.accept for p in self.parameters)
        self._accept_by_name = {p.name: p.accept for p in self.parameters}
        self._plain = _plain_parameters(signature)
        self._converts = any(p.annotation is not None for p in self.parameters)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Check that arguments bind to the signature (their values are not checked).

        Args:
            args: positional arguments.
            kwargs: keyword arguments.

        Raises:
            InvalidArguments: they do not.
        """
        if self._plain is not None and _fits(self._plain, args, kwargs):
            return  # the common case, without Signature.bind's cost on the enqueue path
        self._bound(args, kwargs)

    def check(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Check arguments at enqueue: they bind, fit their annotations and round-trip.

        Args:
            args: positional arguments, as given to ``enqueue``.
            kwargs: keyword arguments, as given to ``enqueue``.

        Raises:
            InvalidArguments: they do not bind, or a value does not fit its annotation.
            SerializationError: a value has no JSON form, nests deeper than
                ``MAX_DEPTH``, or its JSON form would arrive as another value or type.
        """
        if self._plain is not None and _fits(self._plain, args, kwargs):
            # All in C for the common case; _fits made sure args are not too many.
            if not all(map(frozenset.__contains__, self._accepts, map(type, args))):
                for param, value in zip(self.parameters, args, strict=False):
                    if type(value) not in param.accept:
                        self._check_value(param, value, None)
            if kwargs:
                accept_by_name = self._accept_by_name
                for name, value in kwargs.items():
                    if type(value) not in accept_by_name[name]:
                        self._check_value(self._by_name[name], value, None)
            return
        for name, value in self._bound(args, kwargs).arguments.items():
            param = self._by_name[name]
            items: list[tuple[str | None, Any]]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                items = [(f"item {index}", item) for index, item in enumerate(value)]
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                items = [(f"key {key!r}", item) for key, item in value.items()]
            else:
                items = [(None, value)]
            for item, each in items:
                if type(each) not in param.accept:
                    self._check_value(param, each, item)

    def prepare(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Bind decoded arguments and convert each to its parameter's annotation.

        Conversion is lenient (``strict=False``: ``"5"`` becomes ``5`` for an ``int``),
        so producers in other languages can send the JSON form they have.

        Args:
            args: the job's positional arguments, as decoded.
            kwargs: the job's keyword arguments, as decoded.

        Returns:
            The arguments to call the task with (the given lists when nothing converts).

        Raises:
            InvalidArguments: they do not bind, or a value cannot be converted.
        """
        if not self._converts:
            self.bind(args, kwargs)
            return args, kwargs
        if self._plain is not None and _fits(self._plain, args, kwargs):
            by_name = self._by_name
            return (
                [self._convert(p, v, None) for p, v in zip(self.parameters, args, strict=False)],
                {k: self._convert(by_name[k], v, None) for k, v in kwargs.items()},
            )
        bound = self._bound(args, kwargs)
        arguments = bound.arguments
        for name, value in list(arguments.items()):
            param = self._by_name[name]
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                arguments[name] = tuple(
                    self._convert(param, item, f"item {i}") for i, item in enumerate(value)
                )
            elif param.kind is inspect.Parameter.VAR_KEYWORD:
                arguments[name] = {
                    key: self._convert(param, item, f"key {key!r}") for key, item in value.items()
                }
            else:
                arguments[name] = self._convert(param, value, None)
        return list(bound.args), dict(bound.kwargs)

    def _bound(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> inspect.BoundArguments:
        try:
            return self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise InvalidArguments(f"task {self.task!r}: {e}") from None

    def _where(self, param: Parameter, item: str | None) -> str:
        where = f"task {self.task!r}, parameter {param.name!r}"
        return f"{where} ({item})" if item is not None else where

    def _convert(self, param: Parameter, value: Any, item: str | None) -> Any:
        if param.annotation is None or type(value) in param.keep:
            return value
        try:
            return convert(value, param.annotation, strict=False)
        except Exception as e:  # ValidationError, or a RecursionError deep in the stack
            raise InvalidArguments(f"{self._where(param, item)} ({param.type_name}): {e}") from e

    def _check_value(self, param: Parameter, value: Any, item: str | None) -> None:
        """The slow path of :meth:`check`: fit, then the JSON round trip of one value."""
        if param.finite_float and type(value) is float and isfinite(value):
            return
        if param.annotation is None and _json_native(value, 1):
            return  # lists and dicts of JSON types: no encoding needed to know
        where = self._where(param, item)
        data: bytes | None = None
        unencodable: Exception | None = None
        try:
            data = _encoder.encode(value)
        except RecursionError as e:
            raise _too_deep(where, None) from e
        except Exception as e:  # no JSON form; unless it does not fit either (said first)
            unencodable = e
        if data is not None and not depth_within(data):
            raise _too_deep(where, data)
        if param.annotation is not None:
            _check_fits(where, param, value)
        if data is None:
            raise SerializationError(
                f"{where}: {_show(value)} has no JSON form ({unencodable})"
            ) from unencodable
        arrived = _decoder.decode(data)
        if param.annotation is not None:
            try:
                arrived = convert(arrived, param.annotation, strict=False)
            except Exception as e:
                raise SerializationError(
                    f"{where} ({param.type_name}): {_show(value)} would arrive as "
                    f"{_show(arrived)}, which does not convert back ({e})"
                ) from e
        if not _same_or_too_deep(where, value, arrived):
            advice = (
                "; annotate the parameter with the type it takes, or pass JSON-native "
                "values (str, int, finite float, bool, None, lists, dicts with str keys)"
                if param.annotation is None
                else ""
            )
            raise SerializationError(
                f"{where} ({param.type_name}): {_show(value)} would arrive as "
                f"{_show(arrived)}{advice}"
            )


def _check_fits(where: str, param: Parameter, value: Any) -> None:
    """Raise InvalidArguments unless msgspec takes ``value`` as its annotation unchanged."""
    try:
        fitted = convert(value, param.annotation, strict=True)
    except RecursionError as e:
        raise _too_deep(where, None) from e
    except Exception as e:  # ValidationError; TypeError for what msgspec cannot handle
        raise InvalidArguments(
            f"{where}: {_show(value)} does not fit {param.type_name}: {e}"
        ) from e
    if not _same_or_too_deep(where, value, fitted):
        # A record's fields as a dict (a model's model_dump()): the task would get the record.
        hint = (
            f"; pass an instance of {type(fitted).__name__} (the task receives one)"
            if type(value) is dict and record_fields(fitted) is not None
            else ""
        )
        raise InvalidArguments(
            f"{where}: {_show(value)} does not fit {param.type_name} (it would become "
            f"{_show(fitted)}){hint}"
        )


def _too_deep(where: str, data: bytes | None) -> SerializationError:
    depth = f"{nesting_depth(data)} deep" if data is not None else "too deep"
    return SerializationError(f"{where}: nested {depth} (over the limit of {MAX_DEPTH})")


def _show(value: Any) -> str:
    """A short repr with the type, for messages (values can be large)."""
    return f"{_repr.repr(value)} ({type(value).__name__})"


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return repr(annotation).replace("typing.", "").replace("datetime.", "")


class _TooDeep(Exception):
    """Comparison went past MAX_DEPTH (only when encoding failed to catch it first)."""


def _same_or_too_deep(where: str, original: Any, arrived: Any) -> bool:
    try:
        return _same(original, arrived, 0)
    except _TooDeep:
        raise _too_deep(where, None) from None


def _same(a: Any, b: Any, depth: int) -> bool:
    """Whether ``b`` is ``a``: equal, of the same types all the way down.

    An int where a float arrived counts as the same: the annotation asked for a float.
    """
    if depth > MAX_DEPTH:
        raise _TooDeep
    kind = type(a)
    if kind is not type(b):
        return kind is int and type(b) is float and a == b
    if kind is float:
        return bool(a == b or (a != a and b != b))  # NaN is NaN here
    if kind in _JSON_SCALARS:
        return bool(a == b)
    if isinstance(a, tuple | list):
        return len(a) == len(b) and _same_items(a, b, depth)
    if isinstance(a, dict):
        return len(a) == len(b) and _same_items(
            [*a.keys(), *a.values()], [*b.keys(), *b.values()], depth
        )
    return _same_object(a, b, depth)


def _same_items(a: Sequence[Any], b: Sequence[Any], depth: int) -> bool:
    kinds = list(map(type, a))
    if kinds == list(map(type, b)) and _JSON_SCALARS.issuperset(kinds) and a == b:
        return True  # the common case, without a Python-level walk
    return all(_same(x, y, depth + 1) for x, y in zip(a, b, strict=True))


def _same_object(a: Any, b: Any, depth: int) -> bool:
    kind = type(a)
    if kind is Decimal:
        return bool(a.as_tuple() == b.as_tuple())  # "1.50" is not "1.5"; NaN is NaN
    if kind is datetime or kind is time:
        # Aware datetimes compare as instants; the zone must survive too (a ZoneInfo
        # arrives as a fixed offset, which is another zone after a DST change).
        return bool(a == b and a.tzinfo == b.tzinfo)
    fields = record_fields(a)
    if fields is not None:  # a Struct, dataclass, attrs instance or Pydantic model
        return _same(fields, record_fields(b), depth + 1)
    try:
        return bool(a == b)
    except Exception:  # an __eq__ that raises (a signalling NaN): not the same
        return False


def _type_hints(task: str, fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as e:  # NameError of a forward reference, a callable object, ...
        log.warning(
            "task %r: its type annotations cannot be resolved (%s: %s); its arguments "
            "are not converted and must be JSON-native",
            task,
            type(e).__name__,
            e,
        )
        return {}


def _parameter(task: str, param: inspect.Parameter, hint: Any) -> Parameter:
    annotation = None if hint is Any or hint is object else hint
    if annotation is not None:
        try:
            msgspec.inspect.type_info(annotation)
        except Exception as e:  # not a type msgspec can convert to
            log.warning(
                "task %r, parameter %r: msgspec cannot convert to %s (%s); its values are "
                "not converted and must be JSON-native",
                task,
                param.name,
                _type_name(annotation),
                e,
            )
            annotation = None
    members = _scalar_members(annotation)
    if annotation is None:
        accept, finite_float, keep = _JSON_SCALARS - {float}, True, frozenset[type]()
    elif members is None:
        restoring = _self_restoring(annotation)
        accept, finite_float, keep = restoring, False, frozenset()
    else:
        # An int for a float parameter passes: it arrives converted, as the same number.
        accept = (members - {float}) | ({int} if float in members else set())
        finite_float, keep = float in members, members
    return Parameter(param.name, param.kind, annotation, frozenset(accept), finite_float, keep)


def _scalar_members(annotation: Any) -> frozenset[type] | None:
    """The JSON scalar types an annotation is made of (``int | None``), or None."""
    if isinstance(annotation, type):
        return frozenset({annotation}) if annotation in _JSON_SCALARS else None
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    members = frozenset(NoneType if a is None else a for a in typing.get_args(annotation))
    return members if members <= _JSON_SCALARS else None


def _self_restoring(annotation: Any) -> frozenset[type]:
    """For ``date`` or ``date | None`` (and the like): the types that pass as they are."""
    if annotation in _SELF_RESTORING:
        return frozenset({annotation})
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = set(typing.get_args(annotation))
        if len(members) == 2 and NoneType in members and members & _SELF_RESTORING:
            return frozenset(members)
    return frozenset()


def _json_native(value: Any, depth: int) -> bool:
    """Whether a list or dict holds JSON types only (str keys, finite floats), as is.

    False for anything else, and past ``MAX_DEPTH`` (the caller's slow path says why).
    Each level's types are collected in C (``set(map(type, ...))``); Python only steps
    into nested lists and dicts.
    """
    kind = type(value)
    if kind is dict:
        if not _STR_ONLY.issuperset(map(type, value)):
            return False
        items = list(value.values())
    elif kind is list:
        items = value
    else:
        return False
    kinds = set(map(type, items))
    if not kinds <= _JSON_KINDS or depth > MAX_DEPTH:
        return False
    if float in kinds and not all(map(isfinite, [x for x in items if type(x) is float])):
        return False
    if list in kinds or dict in kinds:
        for item in items:
            if (type(item) is list or type(item) is dict) and not _json_native(item, depth + 1):
                return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    """A signature of plain named parameters: names in order, how many are required."""

    names: tuple[str, ...]
    required: int


def _plain_parameters(signature: inspect.Signature) -> _Plain | None:
    """The signature as :class:`_Plain`, or None when it has *args, **kwargs or the like."""
    params = list(signature.parameters.values())
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    defaults = [p.default is not inspect.Parameter.empty for p in params]
    if any(defaults[i] and not defaults[i + 1] for i in range(len(defaults) - 1)):
        return None
    return _Plain(tuple(p.name for p in params), defaults.count(False))


def _fits(plain: _Plain, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether arguments surely bind to a plain signature (False: let bind() decide)."""
    positional = len(args)
    if positional > len(plain.names):
        return False
    if not kwargs:  # the common case, without building anything
        return positional >= plain.required
    rest = plain.names[positional:]
    for name in kwargs:
        if name not in rest:
            return False
    for name in rest[: max(0, plain.required - positional)]:
        if name not in kwargs:
            return False
    return True
