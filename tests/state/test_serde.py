"""State keys encode deterministically (across processes too) and decode to equal keys."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from cadenza.state import POSITION_KEY, StateDecodeError, decode_key, decode_value, encode_key, encode_value
from cadenza.state.safe_codec import UnsupportedValueError


class UserKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    tenant: str
    user: int


scalars = st.one_of(
    st.text(), st.integers(), st.binary(), st.none(), st.booleans(), st.floats(allow_nan=False)
)
keys = st.one_of(scalars, st.tuples(scalars, scalars), st.tuples(st.text(), st.tuples(st.integers())))


@given(keys)
def test_keys_round_trip_to_equal_keys_of_the_same_type(key: object) -> None:
    decoded = decode_key(encode_key(key))
    assert decoded == key
    assert type(decoded) is type(key)


def same_types(a: object, b: object) -> bool:
    """Types alike all the way down: keys keep their types (``0`` and ``False`` are distinct keys,
    and so are ``(0, 0)`` and ``(0, False)``, which Python calls equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b, strict=True))
    return True


@given(keys, keys)
@example((0, 0), (0, False))  # equal in Python, distinct keys: found by this test on 2026-12-06
def test_equal_keys_encode_equal_and_distinct_keys_distinct(a: object, b: object) -> None:
    if a == b and same_types(a, b):
        assert encode_key(a) == encode_key(b)
    if encode_key(a) == encode_key(b):
        assert a == b


def test_keys_python_treats_as_equal_encode_equal() -> None:
    assert encode_key(-0.0) == encode_key(0.0)
    assert encode_key(("a", -0.0)) == encode_key(("a", 0.0))
    assert decode_key(encode_key(("a", (1, None, b"x"), 2.5))) == ("a", (1, None, b"x"), 2.5)
    assert decode_key(encode_key(())) == ()


def test_model_keys_round_trip() -> None:
    key = UserKey(tenant="ads", user=7)
    assert decode_key(encode_key(key)) == key


def test_no_key_can_collide_with_the_position_marker() -> None:
    for key in ("", b"", 0, None, (), "\x00cadenza-position", b"\x00cadenza-position"):
        assert encode_key(key) != POSITION_KEY
        assert not encode_key(key).startswith(b"\x00")


def test_model_keys_encode_the_same_in_processes_with_different_hash_seeds(tmp_path: Path) -> None:
    # Repartitioning and compaction both need equal keys to give equal bytes on every worker; a model's
    # pickle would not (it contains a set whose order follows the hash seed).
    script = tmp_path / "encode.py"
    script.write_text(
        "from tests.state.test_serde import UserKey\n"
        "from cadenza.state import encode_key\n"
        "print(encode_key(UserKey(tenant='ads', user=7)).hex(), encode_key(('a', 1, 2.5)).hex())\n"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.getcwd()}
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True, timeout=60
        )
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_values_round_trip_nested_containers_and_models() -> None:
    value = [[0.0, 1.0, {"count": 3, "at": "2024-01-01"}], [(1.5, UserKey(tenant="t", user=1))]]
    assert decode_value(encode_value(value)) == value


def test_values_and_keys_of_unsupported_types_are_refused_when_encoded() -> None:
    with pytest.raises(UnsupportedValueError, match=r"datetime\.datetime"):
        encode_value([{"at": datetime(2024, 1, 1)}])
    with pytest.raises(UnsupportedValueError, match="frozenset"):
        encode_key(("a", frozenset({1})))


@pytest.mark.parametrize(
    "data",
    [b"", b"?junk", b"i12x", b"fnot-a-float", b"t\x00\x00\x00\x09s", b"p\x80garbage", b"mno.such:Cls\x00{}"],
)
def test_undecodable_keys_raise_state_decode_error(data: bytes) -> None:
    with pytest.raises(StateDecodeError):
        decode_key(data)
