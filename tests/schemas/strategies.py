"""Hypothesis strategies for the test models."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

from tests.schemas.models import Address, Flat, Node, Order, Priority, Side

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)

# Avro's timestamp-millis keeps milliseconds, so generated instants are whole milliseconds.
MILLIS_UTC = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))

ADDRESSES = st.builds(Address, street=st.text(), zip_code=st.none() | st.text(max_size=10))

NODES: st.SearchStrategy[Node] = st.recursive(
    st.builds(Node, value=INT64, children=st.just([])),
    lambda inner: st.builds(Node, value=INT64, children=st.lists(inner, max_size=3)),
    max_leaves=6,
)

ORDERS: st.SearchStrategy[Order] = st.builds(
    Order,
    id=INT64,
    price=FINITE,
    filled=st.booleans(),
    payload=st.binary(max_size=20),
    note=st.none() | st.text(max_size=20),
    quantity=st.none() | INT64,
    tags=st.lists(st.text(max_size=5), max_size=4),
    attributes=st.dictionaries(st.text(max_size=5), FINITE, max_size=4),
    home=ADDRESSES,
    work=st.none() | ADDRESSES,
    side=st.sampled_from(Side),
    priority=st.sampled_from(Priority),
    placed_at=MILLIS_UTC,
    trade_day=st.dates(),
    uid=st.uuids(),
    kind=st.sampled_from(["limit", "market"]),
    venue=st.sampled_from(["x-1", "y"]),
    ref=INT64 | st.text(max_size=8),
    tree=st.none() | NODES,
    history=st.lists(st.sampled_from(Priority), max_size=3),
    scores=st.dictionaries(st.text(max_size=4), st.lists(INT64, max_size=3), max_size=3),
)

FLATS = st.builds(Flat, name=st.text(), count=INT64, ratio=FINITE, ok=st.booleans())
