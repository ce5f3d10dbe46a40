"""The built-in codecs behind format="json"/"avro" implement the same protocol a user's codec does."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from cadenza import AvroFormat, Codec, JsonFormat
from cadenza.errors import ConfigError
from cadenza.schemas import AvroCodec, DecodeError, EncodeError, builtin_format


class Point(BaseModel):
    x: int
    label: str


def test_builtins_implement_the_codec_protocol() -> None:
    assert isinstance(JsonFormat(), Codec)
    assert isinstance(AvroFormat(), Codec)
    assert builtin_format("json").name == "json"
    assert builtin_format("avro").name == "avro"
    with pytest.raises(ConfigError, match="unknown value format"):
        builtin_format("xml")


def test_json_format_round_trips_models_and_raw_objects() -> None:
    codec = JsonFormat()
    data = codec.encode(Point(x=1, label="a"))
    assert codec.decode(data, Point) == Point(x=1, label="a")
    assert codec.decode(data, None) == {"x": 1, "label": "a"}
    with pytest.raises(DecodeError):
        codec.decode(b"{", Point)


def test_avro_format_writes_what_the_avro_codec_reads() -> None:
    codec = AvroFormat()
    data = codec.encode(Point(x=7, label="b"))
    assert AvroCodec(Point).decode(data) == Point(x=7, label="b")
    assert codec.decode(data, Point) == Point(x=7, label="b")
    with pytest.raises(EncodeError, match="pydantic model"):
        codec.encode({"x": 1})
    with pytest.raises(ConfigError, match="model"):
        codec.decode(data, None)
    with pytest.raises(ConfigError, match="registry_client"):
        AvroFormat(subject="s")
