"""Records on the wire: Pydantic models, dataclasses, msgspec Structs and attrs classes. Pure.

A record goes out as its JSON form (an object of its fields) and comes back as the type an
annotation names: a task's parameter for its arguments, its return annotation for a kept
result. msgspec encodes and converts dataclasses, Structs and attrs classes itself, nested
in any way; Pydantic models it reaches through the two hooks here, which every encode and
conversion of arguments and results passes to it: a model encodes as
``model_dump(mode="json")``, and an annotation naming a model class validates the decoded
value with ``model_validate`` (Pydantic's lax mode, as the worker's conversion is lenient).

Pydantic stays optional: this module never imports it. A model can only exist once the
user's own code imported pydantic, so ``sys.modules`` says whether to look for one.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import msgspec


def enc_hook(value: Any) -> Any:
    """msgspec's ``enc_hook``: the JSON form of a value msgspec cannot encode itself.

    Args:
        value: the value.

    Returns:
        A Pydantic model's ``model_dump(mode="json")``.

    Raises:
        NotImplementedError: it is no Pydantic model (msgspec says it has no JSON form).
        Exception: whatever the model's serializer raised for a field with no JSON form.
    """
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        # by alias and with what round-trips: model_validate reads aliases (a camelCase
        # API model), and computed fields would be extra inputs it may forbid
        return value.model_dump(mode="json", by_alias=True, round_trip=True)
    raise NotImplementedError(f"Encoding objects of type {type(value).__name__} is unsupported")


def dec_hook(kind: Any, value: Any) -> Any:
    """msgspec's ``dec_hook``: ``value`` as ``kind``, when msgspec cannot convert to it.

    Args:
        kind: the type asked for.
        value: the decoded value (or, at enqueue, the value given).

    Returns:
        A Pydantic model of class ``kind``: ``value`` itself when it is one already.

    Raises:
        TypeError: ``kind`` is no Pydantic model class (msgspec reports the mismatch).
        ValueError: Pydantic's ``ValidationError``: ``value`` does not validate.
    """
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
        model: Any = kind
        return value if isinstance(value, kind) else model.model_validate(value)
    raise TypeError(f"Expected `{getattr(kind, '__name__', kind)}`, got `{type(value).__name__}`")


def convert(value: Any, kind: Any, *, strict: bool) -> Any:
    """``msgspec.convert`` with the hooks: ``value`` as the type ``kind``.

    Raises:
        msgspec.ValidationError: it does not convert (a model's errors in the message).
    """
    return msgspec.convert(value, kind, strict=strict, dec_hook=dec_hook)


def decode_as(data: bytes, kind: Any) -> Any:
    """JSON ``data`` as the type ``kind``, leniently (``"5"`` for an ``int``), with the hooks:
    how a kept result comes back as its task's return annotation.

    Raises:
        msgspec.DecodeError: it is no JSON, or does not convert (``ValidationError``).
    """
    return msgspec.json.decode(data, type=kind, strict=False, dec_hook=dec_hook)


def record_fields(value: Any) -> list[Any] | None:
    """The field values of a record, in order; None for a value that is no record.

    A record is a msgspec Struct, a dataclass, an attrs instance or a Pydantic model (with
    its extra fields); two records of one type are the same when their fields are.
    """
    if isinstance(value, msgspec.Struct):
        return list(msgspec.structs.astuple(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name) for f in dataclasses.fields(value)]
    attributes = getattr(type(value), "__attrs_attrs__", None)
    if attributes is not None:
        return [getattr(value, a.name) for a in attributes]
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        extra = value.__pydantic_extra__ or {}
        return [*value.__dict__.values(), *extra.keys(), *extra.values()]
    return None
