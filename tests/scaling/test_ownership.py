"""The ownership plan's records and what a worker does about each claim, exactly."""

from __future__ import annotations

import pytest

from cadenza.scaling.ownership import Claim, decode_claim, duty, encode_claim


def test_claims_round_trip() -> None:
    for claim in (Claim("w1"), Claim("w1", 3, "warming", "w2"), Claim("w1", 3, "released", "w2")):
        key, value = encode_claim("g", ("t", 2), claim)
        assert decode_claim(key, value) == ("g", ("t", 2), claim)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        (b"nope", b"{}", "not an ownership record"),
        (b'["g", "t", "0"]', b'{"owner": "a", "epoch": 0, "phase": "owned"}', r"\[group, topic, partition\]"),
        (b'["g", "t", 0]', b'{"owner": "a", "epoch": 0, "phase": "moving"}', "bad ownership claim"),
        (b'["g", "t", 0]', b'{"owner": "a", "epoch": 0, "phase": "warming"}', "needs 'to'"),
        (b'["g", "t", 0]', b'{"owner": "a", "epoch": 0, "phase": "ready", "to": 7}', "must name a worker"),
        (b'["g", "t", 0]', None, "not an ownership record"),
    ],
)
def test_bad_records_say_what_is_wrong(key: bytes, value: bytes | None, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode_claim(key, value)


def test_a_move_advances_through_its_phases() -> None:
    moving = Claim("a", 4, "warming", "b")
    assert moving.advance("ready") == Claim("a", 4, "ready", "b")
    assert moving.advance("released").advance("owned") == Claim("b", 5)
    with pytest.raises(ValueError, match="without a destination"):
        Claim("a").advance("owned")


# (claim, holding, warming) -> duty, for worker "me"; "a" and "b" are other workers.
CASES = [
    (Claim("me"), False, False, "take"),
    (Claim("me"), True, False, None),
    (Claim("a"), True, False, "drop"),
    (Claim("a"), False, True, "cancel"),
    (Claim("a"), False, False, None),
    # A move to this worker: warm, wait, then finish once released (also after a restart).
    (Claim("a", 1, "warming", "me"), False, False, "warm"),
    (Claim("a", 1, "warming", "me"), False, True, None),
    (Claim("a", 1, "ready", "me"), False, True, None),
    (Claim("a", 1, "ready", "me"), False, False, "warm"),
    (Claim("a", 1, "released", "me"), False, True, "finish"),
    (Claim("a", 1, "released", "me"), False, False, "finish"),
    # A move from this worker: run on while the copy warms, release once it is ready.
    (Claim("me", 1, "warming", "b"), True, False, None),
    (Claim("me", 1, "warming", "b"), False, False, "take"),
    (Claim("me", 1, "ready", "b"), True, False, "release"),
    (Claim("me", 1, "ready", "b"), False, False, "release"),
    (Claim("me", 1, "released", "b"), False, False, None),
    # Someone else's move of a partition this worker still runs or warms.
    (Claim("a", 1, "warming", "b"), True, False, "drop"),
    (Claim("a", 1, "warming", "b"), False, True, "cancel"),
    (Claim("a", 1, "released", "b"), False, False, None),
]


@pytest.mark.parametrize(("claim", "holding", "warming", "expected"), CASES)
def test_duty(claim: Claim, holding: bool, warming: bool, expected: str | None) -> None:
    assert duty("me", claim, holding=holding, warming=warming) == expected
