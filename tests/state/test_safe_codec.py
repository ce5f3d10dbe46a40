"""The safe encoding of state and repartition values: round trips, refusals, no code ever run."""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from cadenza.schemas import DecodeError
from cadenza.state import StateDecodeError, decode_key, decode_value, encode_key, encode_value, safe_codec
from cadenza.state.safe_codec import (
    SafeDecodeError,
    UnsupportedValueError,
    allowed_models,
    check,
    dumps,
    loads,
    register_function_models,
    register_model,
)
from cadenza.worker.engine.wire import decode_record_value, encode_record_value


class Point(BaseModel):
    x: int
    label: str


class NeverRegistered(BaseModel):
    secret: str


class Declared(BaseModel):
    n: int


class Returned(BaseModel):
    n: int


def _returns_models(value: int) -> list[Returned] | None:
    return None


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(),
)
key_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary()
)
hashables = st.recursive(
    key_scalars, lambda inner: st.tuples(inner, inner) | st.lists(inner).map(tuple), max_leaves=8
)
values = st.recursive(
    scalars | st.builds(Point, x=st.integers(-(2**63), 2**63 - 1), label=st.text()),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(hashables, inner, max_size=4)
    ),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (NaN equal to NaN, tuple never equal to list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a) if len(a) == len(b) else False
    return bool(a == b)


@given(values)
def test_every_supported_value_round_trips_with_its_types(value: Any) -> None:
    assert _same(loads(dumps(value)), value)
    assert _same(decode_value(encode_value(value)), value)
    assert _same(decode_record_value(encode_record_value(value)), value)
    check(value)  # what encodes passes the check


@given(values)
def test_encoding_is_deterministic(value: Any) -> None:
    assert dumps(value) == dumps(loads(dumps(value)))


def test_tuple_and_list_stay_distinct_and_dict_order_is_kept() -> None:
    assert type(loads(dumps((1, 2)))) is tuple
    assert type(loads(dumps([1, 2]))) is list
    assert dumps((1, 2)) != dumps([1, 2])
    decoded = loads(dumps({"b": 1, (1, "a"): [2], None: (3,), 2.5: b"x"}))
    assert list(decoded) == ["b", (1, "a"), None, 2.5]
    assert decoded[(1, "a")] == [2] and decoded[None] == (3,)


def test_special_floats_and_big_ints() -> None:
    assert loads(dumps(math.inf)) == math.inf
    assert loads(dumps(-math.inf)) == -math.inf
    assert math.isnan(loads(dumps(math.nan)))
    assert loads(dumps(-(2**300))) == -(2**300)
    assert loads(dumps(True)) is True and loads(dumps(1)) == 1 and type(loads(dumps(1))) is int


@pytest.mark.parametrize("value", [{1, 2}, object(), [1, {"a": {frozenset()}}], Path("/x"), 1 + 2j])
def test_unsupported_values_are_refused_when_encoded_naming_the_type(value: Any) -> None:
    with pytest.raises(UnsupportedValueError, match="cannot encode a value of type") as info:
        dumps(value)
    assert info.value.error_type == "UnsupportedValue"
    with pytest.raises(UnsupportedValueError):
        check(value)
    with pytest.raises(UnsupportedValueError):
        encode_record_value(value)
    with pytest.raises(UnsupportedValueError):
        encode_value(value)


def test_models_outside_the_allow_list_are_refused() -> None:
    path = f"{NeverRegistered.__module__}:{NeverRegistered.__qualname__}".encode()
    body = b'{"secret":"s"}'
    forged = b"vm" + len(path).to_bytes(4, "big") + path + len(body).to_bytes(4, "big") + body
    assert path not in allowed_models()
    with pytest.raises(SafeDecodeError, match="not allowed") as info:
        loads(forged)
    assert info.value.error_type == "ModelNotAllowed"
    with pytest.raises(DecodeError, match="not allowed"):
        decode_record_value(forged)
    with pytest.raises(DecodeError, match="not allowed"):
        decode_record_value(b"m" + path + b"\x00" + body)  # the older model form, same allow-list
    with pytest.raises(StateDecodeError, match="not allowed"):
        decode_value(forged)
    with pytest.raises(StateDecodeError, match="not allowed"):
        decode_key(b"m" + path + b"\x00" + body)
    with pytest.raises(DecodeError, match="not allowed"):
        decode_record_value(b"mos:system\x00{}")  # nothing is ever imported by name


def test_declared_and_produced_models_are_allowed() -> None:
    register_model(Declared)
    register_function_models(_returns_models)
    assert f"{__name__}:Declared".encode() in allowed_models()
    assert f"{__name__}:Returned".encode() in allowed_models()
    assert loads(dumps(Point(x=3, label="p"))) == Point(x=3, label="p")  # encoding registered it


class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_crafted_pickles_are_refused_without_running_anything(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Exploit(marker))
    crafted = [payload, b"p" + payload, b"v" + payload, b"m" + payload, b"vm" + payload]
    for data in crafted:
        with pytest.raises(DecodeError):
            decode_record_value(data)
        with pytest.raises(StateDecodeError):
            decode_value(data)
        with pytest.raises(StateDecodeError):
            decode_key(data)
        with pytest.raises(SafeDecodeError):
            loads(data)
    with pytest.raises(DecodeError, match="pickled") as info:
        decode_record_value(b"p" + payload)
    assert info.value.error_type == "PickleRefused"
    with pytest.raises(StateDecodeError, match="pickled"):
        decode_value(payload)
    with pytest.raises(StateDecodeError, match="pickled"):
        decode_key(b"p" + payload)
    assert not marker.exists()


@given(st.binary(max_size=64))
def test_random_bytes_raise_only_decode_errors(data: bytes) -> None:
    for candidate in (data, b"v" + data):
        with contextlib.suppress(SafeDecodeError):
            loads(candidate)
        with contextlib.suppress(DecodeError):
            decode_record_value(candidate)
        with contextlib.suppress(StateDecodeError):
            decode_value(candidate)


def test_unknown_tags_and_trailing_bytes_are_clear_errors() -> None:
    with pytest.raises(SafeDecodeError, match="unknown tag"):
        loads(b"vZ")
    with pytest.raises(SafeDecodeError, match="trailing"):
        loads(dumps(1) + b"N")
    with pytest.raises(SafeDecodeError, match="format byte"):
        loads(b"w")
    with pytest.raises(DecodeError, match="first byte"):
        decode_record_value(b"\x01abc")


def test_deeply_nested_input_is_a_decode_error_not_a_crash() -> None:
    data = b"v" + b"l\x00\x00\x00\x01" * 100_000 + b"N"
    with pytest.raises(SafeDecodeError):
        loads(data)


def test_key_bytes_are_deterministic_and_typed() -> None:
    assert encode_key(("a", 1, 2.5)) == encode_key(("a", 1, 2.5))
    assert encode_key(True) != encode_key(1)
    assert decode_key(encode_key(True)) is True
    assert decode_key(encode_key([1, (2, "x")])) == [1, (2, "x")]
    assert encode_key(Point(x=1, label="a")) == encode_key(Point(x=1, label="a"))


def test_models_of_a_functions_module_are_decodable_without_an_annotation() -> None:
    """A worker that never encoded a map's output model still decodes it from another worker."""
    module = types.ModuleType("cadenza_test_unannotated_models")
    source = (
        "from pydantic import BaseModel\n"
        "class Enriched(BaseModel):\n"
        "    n: int\n"
        "def enrich(x):\n"
        "    return Enriched(n=x)\n"
    )
    exec(compile(source, "<unannotated>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    try:
        path = f"{module.__name__}:Enriched".encode()
        encoded = dumps(module.Enriched(n=3))
        # Forget the class again: this process now plays a worker that never encoded one itself.
        safe_codec._ALLOWED.pop(path)
        safe_codec._PATHS.pop(module.Enriched)
        with pytest.raises(SafeDecodeError, match="is not allowed here"):
            loads(encoded)
        register_function_models(module.enrich)
        assert allowed_models()[path] is module.Enriched
        assert loads(encoded) == module.Enriched(n=3)
    finally:
        del sys.modules[module.__name__]
