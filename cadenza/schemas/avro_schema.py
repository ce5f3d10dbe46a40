"""Avro record schemas derived from pydantic models.

Users describe record values once, as pydantic models; the Avro schema is derived so that the JSON and
Avro wire formats can never drift apart, and so that other languages (and the Schema Registry) see a
plain, documented Avro record.

Mapping (field names are the pydantic alias when one is set, because that is what JSON uses too):

======================================  ===============================================================
Python annotation                        Avro
======================================  ===============================================================
``str`` / ``int`` / ``float``            ``string`` / ``long`` / ``double``
``bool`` / ``bytes``                     ``boolean`` / ``bytes``
``X | None``                             ``["null", X]`` (``[X, "null"]`` when the default is not None)
``X | Y``                                ``[X, Y]`` (only types that need no conversion, one named type)
``list`` / ``set`` / ``tuple[X, ...]``   ``array``
``dict[str, X]``                         ``map``
``BaseModel`` subclass                   ``record`` named after the class, defined once, then by name
``Enum`` subclass                        ``enum``: the values when all are valid Avro names, else names
``Literal["a", "b"]``                    ``enum`` named ``<Model><Field>``; ``string`` if not valid names
``datetime``                             ``long`` / ``timestamp-millis`` (naive values taken as UTC;
                                         read back as aware UTC, sub-millisecond digits dropped)
``date`` / ``UUID``                      ``int`` / ``date``, ``string`` / ``uuid``
======================================  ===============================================================

Anything else (``Any``, ``Decimal``, fixed-size tuples, non-string map keys...) raises
:class:`~cadenza.schemas.errors.SchemaError` naming the model and field, at codec construction.
"""

from __future__ import annotations

import contextlib
import math
import re
import types
from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import Enum
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from uuid import UUID

from fastavro import parse_schema
from fastavro.schema import SchemaParseException
from pydantic import BaseModel, TypeAdapter, ValidationError

from cadenza.schemas.errors import SchemaError

__all__ = ["DEFAULT_NAMESPACE", "AvroMapping", "avro_mapping", "avro_schema"]

DEFAULT_NAMESPACE = "io.cadenza.records"

#: Turns one value (in ``model_dump`` or reader form) into the other form; ``None`` means "as is".
Converter = Callable[[Any], Any]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_ARRAY_ORIGINS: tuple[object, ...] = (
    list,
    set,
    frozenset,
    Sequence,
    MutableSequence,
    AbstractSet,
    MutableSet,
)
_MAP_ORIGINS: tuple[object, ...] = (dict, Mapping, MutableMapping)
_CONTAINER_FACTORIES: tuple[object, ...] = (list, dict, set, frozenset, tuple)
_EPOCH_DATE = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MISSING = object()

_Derived = tuple[Any, Converter | None, Converter | None]


@dataclass(frozen=True, slots=True)
class AvroMapping:
    """A model's Avro schema plus the few value conversions fastavro needs around it.

    ``to_avro`` is applied to ``model.model_dump(by_alias=True)`` before writing and ``from_avro`` to
    the reader's dict before ``model_validate``; both are ``None`` when the model needs none, which
    keeps the per-record path of most models free of any Python-level walk.
    """

    schema: dict[str, Any]
    to_avro: Converter | None
    from_avro: Converter | None


def avro_schema(model: type[BaseModel], *, namespace: str = DEFAULT_NAMESPACE) -> dict[str, Any]:
    """The Avro record schema of ``model``, as a dict ``fastavro.parse_schema`` accepts."""
    return avro_mapping(model, namespace=namespace).schema


def avro_mapping(model: type[BaseModel], *, namespace: str = DEFAULT_NAMESPACE) -> AvroMapping:
    """Derive the schema and the value conversions of ``model`` in one walk over its fields."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SchemaError(f"an Avro schema can only be derived from a pydantic model class, got {model!r}")
    if namespace and not all(_NAME.match(part) for part in namespace.split(".")):
        raise SchemaError(f"Avro namespace {namespace!r} is not a dotted sequence of Avro names")
    deriver = _Deriver()
    schema, to_avro, from_avro = deriver.record(model)
    assert isinstance(schema, dict)  # the first occurrence of a record is its definition
    schema = {"type": "record", "name": schema["name"], "namespace": namespace, "fields": schema["fields"]}
    try:
        parse_schema(schema)
    except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SchemaError(f"{model.__qualname__}: derived Avro schema is invalid: {exc}") from exc
    return AvroMapping(schema=schema, to_avro=to_avro, from_avro=from_avro)


@dataclass(slots=True)
class _RecordConverters:
    """Converters of one record, filled in after its fields; recursive references read them late."""

    to_avro: Converter | None = None
    from_avro: Converter | None = None
    done: bool = False


@dataclass(frozen=True, slots=True)
class _Where:
    model: type[BaseModel]
    field: str

    def __str__(self) -> str:
        return f"{self.model.__qualname__}.{self.field}"


class _Deriver:
    """One schema derivation: remembers which named types are defined so each is defined once."""

    def __init__(self) -> None:
        self._owners: dict[str, object] = {}
        self._records: dict[type[BaseModel], _RecordConverters] = {}
        self._enums: dict[type[Enum], tuple[Converter | None, Converter | None, dict[Enum, str]]] = {}

    # -- named types -------------------------------------------------------------------------------

    def _claim(self, name: str, owner: object, where: object) -> bool:
        """Reserve ``name`` for ``owner``; False when ``owner`` already holds it (so emit a reference)."""
        if not _NAME.match(name):
            raise SchemaError(f"{where}: {name!r} is not a valid Avro name")
        held = self._owners.get(name)
        if held is None:
            self._owners[name] = owner
            return True
        if held == owner:
            return False
        raise SchemaError(
            f"{where}: two types would share the Avro name {name!r} ({_describe(held)} and "
            f"{_describe(owner)}); rename one of them"
        )

    def record(self, model: type[BaseModel], where: object = None) -> _Derived:
        name = _NOT_NAME_CHARS.sub("_", model.__name__)
        if not self._claim(name, model, where or model.__qualname__):
            convs = self._records[model]
            if convs.done:
                return name, convs.to_avro, convs.from_avro
            # A recursive model: its converters are not known yet, so look them up when called.
            return name, _late_to_avro(convs), _late_from_avro(convs)
        convs = self._records[model] = _RecordConverters()
        fields: list[dict[str, Any]] = []
        to_fields: list[tuple[str, Converter]] = []
        from_fields: list[tuple[str, Converter]] = []
        for field_name, info in model.model_fields.items():
            if info.exclude is True:
                continue  # never dumped, so never on the wire; validation falls back to its default
            here = _Where(model, field_name)
            avro_name = info.alias or field_name
            if not _NAME.match(avro_name):
                raise SchemaError(f"{here}: field name {avro_name!r} is not a valid Avro name")
            annotation = info.annotation
            field_schema, to_avro, from_avro = self.type(annotation, here)
            field: dict[str, Any] = {"name": avro_name, "type": field_schema}
            if info.description:
                field["doc"] = info.description
            default = _MISSING
            if info.default_factory is not None:
                if info.default_factory in _CONTAINER_FACTORIES:
                    default = info.default_factory()  # type: ignore[call-arg]
            elif not info.is_required():
                default = info.default
            if default is not _MISSING:
                field["type"], json_default = self._place_default(field_schema, annotation, default)
                if json_default is not _MISSING:
                    field["default"] = json_default
            fields.append(field)
            if to_avro is not None:
                to_fields.append((avro_name, to_avro))
            if from_avro is not None:
                from_fields.append((avro_name, from_avro))
        convs.to_avro = _record_converter(tuple(to_fields)) if to_fields else None
        convs.from_avro = _record_converter(tuple(from_fields)) if from_fields else None
        convs.done = True
        return {"type": "record", "name": name, "fields": fields}, convs.to_avro, convs.from_avro

    def _enum(self, cls: type[Enum], where: _Where) -> _Derived:
        name = _NOT_NAME_CHARS.sub("_", cls.__name__)
        if not self._claim(name, cls, where):
            known = self._enums[cls]
            return name, known[0], known[1]
        members = list(cls)
        if not members:
            raise SchemaError(f"{where}: enum {cls.__qualname__} has no members")
        values = [member.value for member in members]
        by_value = all(isinstance(v, str) and _NAME.match(v) for v in values) and len(set(values)) == len(
            values
        )
        symbols: list[str] = list(values) if by_value else [member.name for member in members]
        for symbol in symbols:
            if not _NAME.match(symbol):
                raise SchemaError(f"{where}: enum {cls.__qualname__} member {symbol!r} is not an Avro name")
        to_symbol: dict[Any, str] = {}
        for member, symbol in zip(members, symbols, strict=True):
            to_symbol[member] = symbol
            # Models with use_enum_values dump raw values; an unhashable value only comes as a member.
            with contextlib.suppress(TypeError):
                to_symbol.setdefault(member.value, symbol)
        # A str-mixin member equals its value, which is then the symbol: nothing to convert.
        to_avro = None if by_value and issubclass(cls, str) else _lookup_converter(to_symbol)
        # By value, pydantic turns the symbol back into the member by itself.
        from_avro = (
            None if by_value else _lookup_converter({s: m for m, s in zip(members, symbols, strict=True)})
        )
        self._enums[cls] = (to_avro, from_avro, {m: s for m, s in zip(members, symbols, strict=True)})
        return {"type": "enum", "name": name, "symbols": symbols}, to_avro, from_avro

    def _container(
        self, kind: str, field: str, inner: Any, converter: Callable[[Converter], Converter], where: _Where
    ) -> _Derived:
        """An array or map of ``inner``: converted item by item when ``inner`` needs converting."""
        schema, to_inner, from_inner = self.type(inner, where)
        return (
            {"type": kind, field: schema},
            None if to_inner is None else converter(to_inner),
            None if from_inner is None else converter(from_inner),
        )

    # -- types -------------------------------------------------------------------------------------

    def type(self, annotation: Any, where: _Where) -> _Derived:
        tp = _unwrap(annotation)
        if tp is str:
            return "string", None, None
        if tp is bool:
            return "boolean", None, None
        if tp is int:
            return "long", None, None
        if tp is float:
            return "double", None, None
        if tp is bytes:
            return "bytes", None, None
        if tp is type(None):
            return "null", None, None
        if tp is datetime:
            return {"type": "long", "logicalType": "timestamp-millis"}, _datetime_to_avro, None
        if tp is date:
            return {"type": "int", "logicalType": "date"}, None, None
        if tp is UUID:
            return {"type": "string", "logicalType": "uuid"}, None, None
        origin = get_origin(tp)
        args = get_args(tp)
        if origin is Union or origin is types.UnionType:
            return self._union(args, where)
        if origin is Literal:
            return self._literal(args, where)
        if origin in _ARRAY_ORIGINS or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            if not args:
                raise SchemaError(f"{where}: give the item type of {tp!r}, e.g. list[int]")
            return self._container("array", "items", args[0], _array_converter, where)
        if origin in _MAP_ORIGINS:
            if len(args) != 2 or _unwrap(args[0]) is not str:
                raise SchemaError(f"{where}: Avro maps need str keys, got {tp!r}")
            return self._container("map", "values", args[1], _map_converter, where)
        if tp in _ARRAY_ORIGINS or tp in _MAP_ORIGINS or tp is tuple:
            raise SchemaError(f"{where}: give the item type of {tp!r}, e.g. list[int] or dict[str, int]")
        if isinstance(tp, type) and origin is None:
            if issubclass(tp, Enum):
                return self._enum(tp, where)
            if issubclass(tp, BaseModel):
                return self.record(tp, where)
        raise SchemaError(
            f"{where}: type {tp!r} has no Avro mapping; use str, int, float, bool, bytes, datetime, "
            "date, UUID, an Enum, a Literal, a pydantic model, or list/dict/Optional of those"
        )

    def _union(self, args: tuple[Any, ...], where: _Where) -> _Derived:
        non_null = [a for a in args if a is not type(None)]
        has_null = len(non_null) < len(args)
        branches = [self.type(a, where) for a in non_null]
        if len(branches) == 1:
            schema, to_avro, from_avro = branches[0]
            return (
                ["null", schema],
                None if to_avro is None else _nullable_converter(to_avro),
                None if from_avro is None else _nullable_converter(from_avro),
            )
        if any(to_avro is not None or from_avro is not None for _, to_avro, from_avro in branches):
            raise SchemaError(
                f"{where}: a union of several types may only hold str, int, float, bool, bytes, date, UUID, "
                "containers of those and at most one model (enum and datetime members cannot be told "
                "apart once dumped)"
            )
        named = [s for s, _, _ in branches if _is_named(s)]
        if len(named) > 1:
            raise SchemaError(
                f"{where}: a union may hold at most one model, enum or Literal type: their dumped values "
                "cannot be told apart when writing"
            )
        kinds = [_kind(s) for s, _, _ in branches]
        if len(set(kinds)) != len(kinds):
            raise SchemaError(f"{where}: union {args!r} has two branches of the same Avro type")
        return (["null"] if has_null else []) + [s for s, _, _ in branches], None, None

    def _literal(self, values: tuple[Any, ...], where: _Where) -> _Derived:
        if all(isinstance(v, str) for v in values):
            if all(_NAME.match(v) for v in values):
                name = where.model.__name__ + "".join(p.capitalize() for p in where.field.split("_"))
                name = _NOT_NAME_CHARS.sub("_", name)
                symbols = list(dict.fromkeys(values))
                if not self._claim(name, ("Literal", where.model, where.field), where):
                    return name, None, None
                return {"type": "enum", "name": name, "symbols": symbols}, None, None
            return "string", None, None
        if all(type(v) is bool for v in values):
            return "boolean", None, None
        if all(type(v) is int for v in values):
            return "long", None, None
        raise SchemaError(f"{where}: Literal{list(values)!r} mixes types; use values of one type")

    # -- defaults ----------------------------------------------------------------------------------

    def _place_default(self, schema: Any, annotation: Any, value: Any) -> tuple[Any, Any]:
        """The field schema (union branches reordered) and the JSON default, or ``_MISSING``.

        Avro takes a union's default from its first branch, so the branch the default belongs to moves
        to the front; a default that does not validate strictly as the annotation is left out rather
        than written into a schema other readers would reject.
        """
        try:
            json_default = self._json_default(value)
        except _NoDefaultError:
            return schema, _MISSING
        if not isinstance(schema, list):
            return schema, json_default if _valid(annotation, value) else _MISSING
        if value is None:
            return schema, None if "null" in schema else _MISSING  # null is first by construction
        tp = _unwrap(annotation)
        non_null = [a for a in get_args(tp) if a is not type(None)]
        offset = 1 if schema and schema[0] == "null" else 0
        for index, branch in enumerate(non_null):
            if _valid(branch, value):
                position = index + offset
                reordered = [schema[position], *schema[:position], *schema[position + 1 :]]
                return reordered, json_default
        return schema, _MISSING

    def _json_default(self, value: Any) -> Any:
        """``value`` in Avro's JSON default encoding; raises ``_NoDefaultError`` when it has none."""
        if isinstance(value, Enum):  # before str/int: str- and int-mixin members are both
            return self._enum_symbol(value)
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _NoDefaultError
            return value
        if isinstance(value, bytes):
            return value.decode("latin-1")  # Avro's JSON form of bytes: one code point per byte
        if isinstance(value, datetime):
            aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            delta = aware - _EPOCH
            return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
        if isinstance(value, date):
            return (value - _EPOCH_DATE).days
        if isinstance(value, UUID):
            return str(value)
        if isinstance(value, list | tuple | set | frozenset):
            return [self._json_default(item) for item in value]
        if isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise _NoDefaultError
            return {k: self._json_default(v) for k, v in value.items()}
        if isinstance(value, BaseModel):
            return {
                info.alias or name: self._json_default(getattr(value, name))
                for name, info in type(value).model_fields.items()
                if info.exclude is not True
            }
        raise _NoDefaultError

    def _enum_symbol(self, member: Enum) -> str:
        known = self._enums.get(type(member))
        if known is None:
            raise _NoDefaultError
        return known[2][member]


class _NoDefaultError(Exception):
    """The default has no Avro JSON form; the field is then written without one."""


def _valid(annotation: Any, value: Any) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value, strict=True)
    except ValidationError:
        return False
    except Exception:  # pydantic may refuse to build an adapter for an exotic annotation
        return False
    return True


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated``, ``NewType`` and ``type X = ...`` aliases down to the type they stand for."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif hasattr(tp, "__supertype__"):  # typing.NewType
            tp = tp.__supertype__
        elif type(tp).__name__ == "TypeAliasType" and hasattr(tp, "__value__"):
            tp = tp.__value__
        else:
            return tp


def _is_named(schema: Any) -> bool:
    if isinstance(schema, dict):
        return schema.get("type") in ("record", "enum", "fixed")
    return isinstance(schema, str) and schema not in _PRIMITIVES


def _kind(schema: Any) -> str:
    if isinstance(schema, str):
        return schema if schema in _PRIMITIVES else f"named:{schema}"
    if isinstance(schema, dict):
        kind = schema["type"]
        return f"named:{schema['name']}" if kind in ("record", "enum", "fixed") else str(kind)
    return "union"


def _describe(owner: object) -> str:
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    if isinstance(owner, tuple) and len(owner) == 3:
        return f"the Literal of {owner[1].__qualname__}.{owner[2]}"
    return repr(owner)


# -- converters: small closures built once per model, so per-record work is a few dict stores ---------


def _datetime_to_avro(value: Any) -> Any:
    # fastavro reads naive datetimes as *local* time (time.mktime); cadenza treats them as UTC so a
    # record encodes the same on every machine.
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _lookup_converter(table: dict[Any, Any]) -> Converter:
    get = table.get

    def convert(value: Any) -> Any:
        try:
            return get(value, value)
        except TypeError:  # unhashable: not ours, let the writer or validator report it
            return value

    return convert


def _nullable_converter(inner: Converter) -> Converter:
    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


def _array_converter(inner: Converter) -> Converter:
    def convert(value: Any) -> Any:
        return [inner(item) for item in value]

    return convert


def _map_converter(inner: Converter) -> Converter:
    def convert(value: Any) -> Any:
        return {key: inner(item) for key, item in value.items()}

    return convert


def _record_converter(fields: tuple[tuple[str, Converter], ...]) -> Converter:
    def convert(value: Any) -> Any:
        # The dict is fresh (from model_dump or the reader), so converting in place is safe.
        for name, inner in fields:
            if name in value:
                value[name] = inner(value[name])
        return value

    return convert


def _late_to_avro(convs: _RecordConverters) -> Converter:
    def convert(value: Any) -> Any:
        inner = convs.to_avro
        return value if inner is None else inner(value)

    return convert


def _late_from_avro(convs: _RecordConverters) -> Converter:
    def convert(value: Any) -> Any:
        inner = convs.from_avro
        return value if inner is None else inner(value)

    return convert
