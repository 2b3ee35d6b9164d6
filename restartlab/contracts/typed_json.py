"""One tolerant reader and one writer for the records declared as dataclasses.

The reader, `read(cls, value)`, takes a JSON object field by field. It reads each by its declared
type, through jsonvalue's rules. The writer, `to_dict(record)`, writes the keys in the order of the
fields, and each nested record as a mapping. It leaves out a field named in the class's OMIT_NONE
where it is None. There a record's keys say what happened. A layer that did not notice a fault has
no key, not a null.

The rules, for a field:
- A value of the wrong type reads as absent. It is None where the field is Optional, else its default.
- A field that does not read makes the whole record unreadable (None). This holds for a field
  without a default, or one named in the class's REQUIRED. A list of such records leaves it out,
  as each reader in contracts/ does with a torn line.
- A list or a mapping keeps the items that read and leaves out the rest.
- A Union reads as the first of its types that reads the value. A Literal reads only as one of its
  values.
- `Any` is taken as it is. It is a framework's or another module's JSON, not ours to check here.

Standard library only: the collector and `simulate` run on a login node."""
import dataclasses
import functools
import typing
from typing import Any, Dict, Hashable, Literal, Optional, Tuple, Type, TypeVar, Union, cast

from .jsonvalue import integer, number, text

T = TypeVar("T")
_UNREAD = object()  # a value that does not read as its type


def to_dict(record: Any) -> Any:
    """A record (or a list or mapping of them) as the JSON value it is written as."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        omit = getattr(record, "OMIT_NONE", ())
        got = ((f.name, getattr(record, f.name)) for f in dataclasses.fields(record))
        return {k: to_dict(v) for k, v in got if not (v is None and k in omit)}
    if isinstance(record, (list, tuple)):
        return [to_dict(v) for v in record]
    if isinstance(record, dict):
        return {k: to_dict(v) for k, v in record.items()}
    return record


def read(cls: Type[T], v: object) -> Optional[T]:
    """v as a cls; None where v is not a JSON object or a REQUIRED field of cls does not read."""
    if not isinstance(v, dict):
        return None
    vals: Dict[str, Any] = {}
    for name, (tp, required) in _fields(cast(Hashable, cls)).items():
        got = _value(tp, v.get(name))
        if got is _UNREAD:
            if required:
                return None
            continue  # the field's default
        vals[name] = got
    return cls(**vals)


@functools.lru_cache(maxsize=None)
def hints(cls: Any) -> Dict[str, Any]:
    """{field: its declared type} of a record class."""
    return typing.get_type_hints(cls)


def record_class(tp: Any) -> Optional[type]:
    """The record class a field of type tp holds (in an Optional or a Union), else None."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    return next((a for a in typing.get_args(tp) if isinstance(a, type) and dataclasses.is_dataclass(a)), None) \
        if typing.get_origin(tp) is Union else None


def item_type(tp: Any) -> Any:
    """The item type of a list field (in an Optional); Any when tp is no list."""
    if typing.get_origin(tp) is Union:
        tp = next((a for a in typing.get_args(tp) if typing.get_origin(a) is list), Any)
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else Any


@functools.lru_cache(maxsize=None)
def _fields(cls: Any) -> Dict[str, Tuple[Any, bool]]:
    """{field: (its type, whether the record needs it)}, in the fields' order."""
    got, named = hints(cls), getattr(cls, "REQUIRED", ())
    return {f.name: (got[f.name], f.name in named or (f.default is dataclasses.MISSING and
                                                        f.default_factory is dataclasses.MISSING))
            for f in dataclasses.fields(cls)}


def _value(tp: Any, v: object) -> Any:
    if tp is Any:
        return v
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:
        if v is None:
            return None if type(None) in args else _UNREAD
        # the first of its types that reads it (Union[int, AtStep]: a number, else a record)
        got = next((g for g in (_value(a, v) for a in args if a is not type(None)) if g is not _UNREAD), _UNREAD)
        return None if got is _UNREAD and type(None) in args else got
    if origin is Literal:
        return v if any(v is a or (type(v) is type(a) and v == a) for a in args) else _UNREAD
    x: object
    if tp is float:
        x = number(v)
    elif tp is int:
        x = integer(v)
    elif tp is str:
        x = text(v)
    elif tp is bool:
        x = v if isinstance(v, bool) else None
    elif origin is list:
        if not isinstance(v, list):
            return _UNREAD
        return [y for y in (_value(args[0], i) for i in v) if y is not _UNREAD]
    elif origin is dict:
        if not isinstance(v, dict):
            return _UNREAD
        got = ((k, _value(args[1], i)) for k, i in v.items() if isinstance(k, str))
        return {k: y for k, y in got if y is not _UNREAD}
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        x = read(tp, v)
    else:
        raise TypeError(f"typed_json has no reader for {tp}")
    return _UNREAD if x is None else x
