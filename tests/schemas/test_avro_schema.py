"""Deriving Avro schemas from pydantic models."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal, NewType

import avro.schema
import pytest
from fastavro import parse_schema
from pydantic import BaseModel, Field

from cadenza.errors import CadenzaError
from cadenza.schemas import DEFAULT_NAMESPACE, SchemaError, avro_schema
from tests.schemas.models import Node, Order

ADDRESS = {
    "type": "record",
    "name": "Address",
    "fields": [
        {"name": "street", "type": "string"},
        {"name": "zip_code", "type": ["null", "string"], "default": None},
    ],
}
PRIORITY = {"type": "enum", "name": "Priority", "symbols": ["LOW", "HIGH"]}
NODE = {
    "type": "record",
    "name": "Node",
    "fields": [
        {"name": "value", "type": "long"},
        {"name": "children", "type": {"type": "array", "items": "Node"}, "default": []},
    ],
}
ORDER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "io.cadenza.records",
    "fields": [
        {"name": "id", "type": "long", "doc": "Exchange order id"},
        {"name": "price", "type": "double"},
        {"name": "filled", "type": "boolean", "default": False},
        {"name": "payload", "type": "bytes", "default": "\u0000\u00ff"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "quantity", "type": ["long", "null"], "default": 5},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "attributes", "type": {"type": "map", "values": "double"}, "default": {}},
        {"name": "home", "type": ADDRESS},
        {"name": "work", "type": ["null", "Address"], "default": None},
        {
            "name": "side",
            "type": {"type": "enum", "name": "Side", "symbols": ["buy", "sell"]},
            "default": "buy",
        },
        {"name": "priority", "type": PRIORITY, "default": "HIGH"},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "trade_day", "type": {"type": "int", "logicalType": "date"}, "default": 18263},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "kind",
            "type": {"type": "enum", "name": "OrderKind", "symbols": ["limit", "market"]},
            "default": "limit",
        },
        {"name": "venue", "type": "string", "default": "y"},
        {"name": "ref", "type": ["string", "long"], "default": "none"},
        {"name": "tree", "type": ["null", NODE], "default": None},
        {"name": "history", "type": {"type": "array", "items": "Priority"}, "default": ["LOW"]},
        {
            "name": "scores",
            "type": {"type": "map", "values": {"type": "array", "items": "long"}},
            "default": {},
        },
    ],
}


def test_rich_model_schema_is_exactly_as_documented() -> None:
    assert avro_schema(Order) == ORDER_SCHEMA


def test_schema_is_accepted_by_fastavro_and_the_reference_implementation() -> None:
    parse_schema(avro_schema(Order))
    parsed = avro.schema.parse(json.dumps(avro_schema(Order)))
    assert parsed.fullname == "io.cadenza.records.Order"  # type: ignore[attr-defined]


def test_namespace_is_configurable() -> None:
    assert DEFAULT_NAMESPACE == "io.cadenza.records"
    schema = avro_schema(Node, namespace="com.example.v1")
    assert schema["namespace"] == "com.example.v1"
    assert schema["name"] == "Node"
    with pytest.raises(SchemaError, match="namespace"):
        avro_schema(Node, namespace="not a namespace")


def test_recursive_model_references_itself_by_name() -> None:
    schema = avro_schema(Node)
    assert schema["fields"][1]["type"] == {"type": "array", "items": "Node"}


def test_optional_with_non_null_default_puts_its_type_first() -> None:
    class M(BaseModel):
        a: int | None = 3
        b: str | None = None
        c: float | None

    fields = {f["name"]: f for f in avro_schema(M)["fields"]}
    assert fields["a"] == {"name": "a", "type": ["long", "null"], "default": 3}
    assert fields["b"] == {"name": "b", "type": ["null", "string"], "default": None}
    assert fields["c"] == {"name": "c", "type": ["null", "double"]}


def test_defaults_without_a_json_form_are_left_out() -> None:
    class M(BaseModel):
        stamp: datetime = Field(default_factory=lambda: datetime.now(UTC))
        ratio: float = float("nan")
        when: datetime = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)

    fields = {f["name"]: f for f in avro_schema(M)["fields"]}
    assert "default" not in fields["stamp"]
    assert "default" not in fields["ratio"]
    assert fields["when"]["default"] == 1000


def test_annotated_newtype_and_abstract_containers_are_unwrapped() -> None:
    UserId = NewType("UserId", int)

    class M(BaseModel):
        a: Annotated[int, Field(ge=0)]
        b: UserId
        c: Sequence[str]
        d: tuple[int, ...]
        e: frozenset[str]

    types = [f["type"] for f in avro_schema(M)["fields"]]
    assert types == [
        "long",
        "long",
        {"type": "array", "items": "string"},
        {"type": "array", "items": "long"},
        {"type": "array", "items": "string"},
    ]


def test_literal_mappings() -> None:
    class M(BaseModel):
        flag: Literal[True]
        level: Literal[1, 2, 3]
        mode: Literal["on", "off"]

    types = [f["type"] for f in avro_schema(M)["fields"]]
    assert types == ["boolean", "long", {"type": "enum", "name": "MMode", "symbols": ["on", "off"]}]


class _Empty(Enum):
    pass


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (Any, "has no Avro mapping"),
        (Decimal, "has no Avro mapping"),
        (dict[int, str], "str keys"),
        (tuple[int, str], "has no Avro mapping"),
        (list, "item type"),
        (Literal[1, "a"], "mixes types"),
        (int | list[int] | list[str], "same Avro type"),
    ],
)
def test_unsupported_types_name_model_and_field(annotation: Any, message: str) -> None:
    model = type("Bad", (BaseModel,), {"__annotations__": {"thing": annotation}, "__module__": __name__})
    with pytest.raises(SchemaError, match=message) as info:
        avro_schema(model)
    assert "Bad.thing" in str(info.value)
    assert isinstance(info.value, CadenzaError)


def test_union_of_two_models_is_refused() -> None:
    class A(BaseModel):
        x: int

    class B(BaseModel):
        x: int

    class M(BaseModel):
        either: A | B

    with pytest.raises(SchemaError, match=r"M\.either"):
        avro_schema(M)


def test_union_with_datetime_branch_is_refused() -> None:
    class M(BaseModel):
        at: datetime | str

    with pytest.raises(SchemaError, match=r"M\.at"):
        avro_schema(M)


def test_two_classes_with_one_name_are_refused() -> None:
    def make() -> type[BaseModel]:
        class Inner(BaseModel):
            x: int

        return Inner

    first, second = make(), make()

    class M(BaseModel):
        a: first  # type: ignore[valid-type]
        b: second  # type: ignore[valid-type]

    with pytest.raises(SchemaError, match="share the Avro name 'Inner'"):
        avro_schema(M)


def test_invalid_field_alias_is_refused() -> None:
    class M(BaseModel):
        x: int = Field(alias="not-a-name")

    with pytest.raises(SchemaError, match=r"M\.x"):
        avro_schema(M)


def test_excluded_fields_are_not_on_the_wire() -> None:
    class M(BaseModel):
        kept: int
        secret: str = Field(default="", exclude=True)

    assert [f["name"] for f in avro_schema(M)["fields"]] == ["kept"]


def test_not_a_model_is_refused() -> None:
    with pytest.raises(SchemaError):
        avro_schema(dict)  # type: ignore[arg-type]


def test_empty_enum_is_refused() -> None:
    class M(BaseModel):
        e: _Empty

    with pytest.raises(SchemaError, match="no members"):
        avro_schema(M)
