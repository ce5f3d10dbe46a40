"""Models shared by the schema and codec tests: one of each supported annotation."""

from __future__ import annotations

from datetime import date, datetime
from enum import Enum, StrEnum
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field


class Side(StrEnum):
    BUY = "buy"
    SELL = "sell"


class Priority(Enum):
    """Values are not Avro names, so the symbols are the member names."""

    LOW = 1
    HIGH = 2


class Address(BaseModel):
    street: str
    zip_code: str | None = None


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Order(BaseModel):
    """Every supported annotation once, with and without defaults."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    order_id: int = Field(alias="id", description="Exchange order id")
    price: float
    filled: bool = False
    payload: bytes = b"\x00\xff"
    note: str | None = None
    quantity: int | None = 5
    tags: list[str] = Field(default_factory=list)
    attributes: dict[str, float] = {}
    home: Address
    work: Address | None = None
    side: Side = Side.BUY
    priority: Priority = Priority.HIGH
    placed_at: datetime
    trade_day: date = date(2020, 1, 2)
    uid: UUID
    kind: Literal["limit", "market"] = "limit"
    venue: Literal["x-1", "y"] = "y"
    ref: int | str = "none"
    tree: Node | None = None
    history: list[Priority] = [Priority.LOW]
    scores: dict[str, list[int]] = {}


class Flat(BaseModel):
    """A model with nothing to convert, for the fast path."""

    name: str
    count: int
    ratio: float
    ok: bool
