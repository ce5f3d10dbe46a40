"""An in-memory stand-in for confluent-kafka's SchemaRegistryClient (only the methods codecs call)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class FakeRegistryError(Exception):
    """Shaped like confluent_kafka.schema_registry.SchemaRegistryError."""

    def __init__(self, http_status_code: int, error_code: int, error_message: str) -> None:
        super().__init__(error_message)
        self.http_status_code = http_status_code
        self.error_code = error_code


@dataclass(frozen=True)
class FakeSchema:
    schema_str: str
    schema_type: str = "AVRO"
    references: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class FakeRegisteredSchema:
    schema_id: int
    schema: Any


class FakeRegistry:
    """Ids start at 100 so no test passes by accident with id 0 or 1."""

    def __init__(self) -> None:
        self.by_id: dict[int, Any] = {}
        self.ids: dict[tuple[str, str], int] = {}
        self.calls: list[str] = []
        self.outage = False

    def add(self, subject: str, schema: Any) -> int:
        key = (subject, schema.schema_str)
        if key not in self.ids:
            self.ids[key] = 100 + len(self.by_id)
            self.by_id[self.ids[key]] = schema
        return self.ids[key]

    def register_schema(self, subject_name: str, schema: Any, normalize_schemas: bool = False) -> int:
        self.calls.append("register_schema")
        return self.add(subject_name, schema)

    def lookup_schema(self, subject_name: str, schema: Any) -> FakeRegisteredSchema:
        self.calls.append("lookup_schema")
        key = (subject_name, schema.schema_str)
        if key not in self.ids:
            raise FakeRegistryError(404, 40403, "Schema not found")
        return FakeRegisteredSchema(self.ids[key], schema)

    def get_schema(self, schema_id: int, subject_name: str | None = None, fmt: str | None = None) -> Any:
        self.calls.append("get_schema")
        if self.outage:
            raise ConnectionError("registry unreachable")
        if schema_id not in self.by_id:
            raise FakeRegistryError(404, 40403, f"Schema {schema_id} not found")
        return self.by_id[schema_id]
