"""The scheduling context every record carries, and its wire form in the ``cadenza-ctx`` Kafka header.

A record's context must survive hops through Kafka topics (repartitions, sinks read by another
pipeline), so its deadline still holds in the next process. The header is read for every record a
worker fetches, hence a fixed binary layout parsed with one precompiled :class:`struct.Struct` rather
than JSON or Avro. The layout is documented byte by byte in ``cadenza/schemas/CONTEXT_LAYOUT.md``.

Decoding is total: headers come from the network and from producers we do not control, and one bad
header must cost one fresh context (and a counter increment), never a crashed worker.
"""

from __future__ import annotations

import math
import os
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "CONTEXT_HEADER",
    "CONTEXT_VERSION",
    "MAX_CONTEXT_BYTES",
    "MAX_ID_BYTES",
    "MAX_TIME_US",
    "ContextDecodeStats",
    "SchedulingContext",
    "decode_context",
    "decode_or_fresh",
    "encode_context",
    "new_trace_id",
    "pack_trace_id",
    "retrace",
    "retrace_parts",
    "start_deadline",
    "trace_id_bits",
]

CONTEXT_HEADER = "cadenza-ctx"
"""Name of the Kafka header that carries the encoded context."""

CONTEXT_VERSION = 1
"""Version byte written first; a decoder refuses versions it does not know instead of guessing."""

MAX_ID_BYTES = 255
"""Longest pipeline or tenant id, in UTF-8 bytes (each has a one-byte length prefix)."""

# version u8 | t_F i64 us | L i64 us | priority f64 | path cost u32 us | hops u16 | trace u64
# | pipeline id length u8 | tenant id length u8     -- then the two ids, UTF-8, in that order.
_FIXED = struct.Struct("<BqqdIHQBB")
_FIXED_SIZE = _FIXED.size  # 41
MAX_CONTEXT_BYTES = _FIXED_SIZE + 2 * MAX_ID_BYTES  # 551
"""Longest valid header; anything longer is refused before parsing (the bound on what a header costs)."""
MAX_TIME_US = 2**52
"""Largest magnitude of ``t_F`` and ``L`` in microseconds (about 142 years): within it every
microsecond has its own float of seconds, so decoding and re-encoding is exact."""
_ROUND_EXACT_US = 2**51  # below this, round(n / 1e6 * 1e6) == n for every integer n
_U32_MAX = 0xFFFF_FFFF
_U16_MAX = 0xFFFF
_US = 1_000_000

_ID_LENGTHS_AT = _FIXED_SIZE - 2
_TRACE_AT = _ID_LENGTHS_AT - 8
_TRACE_END = _ID_LENGTHS_AT
_pack_trace = struct.Struct("<Q").pack

# A worker sees few distinct (pipeline, tenant) pairs, so the id bytes (with their lengths) are
# mapped to the decoded strings: one slice and a dict lookup instead of two slices and two UTF-8
# decodes. Only valid ids enter; the cache is cleared when full so hostile headers cannot grow it.
_ID_CACHE_SIZE = 1024
_id_cache: dict[bytes, tuple[str, str]] = {}

_isfinite = math.isfinite
_unpack_from = _FIXED.unpack_from
_pack = _FIXED.pack


@dataclass(slots=True)
class SchedulingContext:
    """Per-record scheduling state, created by a policy at the source and at each operator.

    Mutable and slotted because one is made for every record an operator emits; freezing would make
    construction noticeably slower on the hottest path of the worker.
    """

    pipeline_id: str
    tenant_id: str
    frontier_time: float
    """``t_F``: epoch seconds at which the input this record's result depends on arrived or will close."""
    latency_target: float
    """``L``: seconds allowed between ``t_F`` and the result."""
    priority: float
    """The priority the policy last computed, for tracing; the scheduler recomputes what it orders by."""
    path_cost: float
    """Estimated seconds from the operator that will run this record to the sink (``C_path``)."""
    hops: int
    """Operators (and topics) the record's lineage has passed since its source."""
    trace_id: int
    """Unsigned 64-bit id shared by every record descending from one source record."""


def result_deadline(ctx: SchedulingContext) -> float:
    """The moment the result is due, ``t_F + L``: edf orders by it, and cameo calls a record tardy
    once it has passed (its result is late whatever runs next)."""
    return ctx.frontier_time + ctx.latency_target


def start_deadline(ctx: SchedulingContext) -> float:
    """Cameo's start deadline ``t_F + L - C_path``: the latest moment the record can start and still
    let its result meet the target. Defined once: the cameo policy orders by it and the worker paces
    other work (a warm copy's reading) by the earliest one queued; the two must never disagree."""
    return ctx.frontier_time + ctx.latency_target - ctx.path_cost


# A private generator seeded from the OS: tracing needs uniqueness, not secrecy, and getrandbits on
# a Random instance is much cheaper per record than a system call to os.urandom.
_trace_rng = random.Random(int.from_bytes(os.urandom(16), "little"))


def _reseed_trace_ids() -> None:
    _trace_rng.seed(int.from_bytes(os.urandom(16), "little"))


# A forked child (multiprocessing's default start method on Linux) would otherwise draw the very
# trace ids its parent draws next, and two workers' traces would be taken for one.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_trace_ids)


def new_trace_id() -> int:
    """Return a random unsigned 64-bit trace id for a record entering at a source."""
    return _trace_rng.getrandbits(64)


def trace_id_bits() -> Callable[[int], int]:
    """The trace-id generator's ``getrandbits``, for a loop that makes many ids (call it with 64,
    as :func:`new_trace_id` does). Take it per loop rather than keep it: a bound method kept on an
    object would pickle the generator's state with it."""
    return _trace_rng.getrandbits


def encode_context(ctx: SchedulingContext) -> bytes:
    """Serialize ``ctx`` for the ``cadenza-ctx`` header.

    Path cost and hops saturate at their field maxima (71.6 minutes, 65535) because they are
    estimates and counters where "huge" is all a reader needs to know. Everything else that cannot be
    represented is refused with :class:`ValueError`, so a bad context is caught at the producer that
    made it rather than silently turning into a fresh context downstream.
    """
    pipeline = ctx.pipeline_id.encode()
    tenant = ctx.tenant_id.encode()
    if len(pipeline) > MAX_ID_BYTES or len(tenant) > MAX_ID_BYTES:
        which = "pipeline_id" if len(pipeline) > MAX_ID_BYTES else "tenant_id"
        raise ValueError(
            f"scheduling context {which} is {max(len(pipeline), len(tenant))} bytes in UTF-8; "
            f"the cadenza-ctx header allows at most {MAX_ID_BYTES}"
        )
    latency = ctx.latency_target
    path_cost = ctx.path_cost
    priority = ctx.priority
    if not (latency >= 0.0 and path_cost >= 0.0 and ctx.hops >= 0 and _isfinite(priority)):
        raise ValueError(
            "scheduling context needs non-negative latency_target, path_cost and hops and a finite "
            f"priority, got {ctx!r}"
        )
    try:
        t_us = round(ctx.frontier_time * _US)
        l_us = round(latency * _US)
        path_us = round(path_cost * _US)
    except (OverflowError, ValueError):
        raise ValueError(f"scheduling context times and durations must be finite, got {ctx!r}") from None
    if not (-_ROUND_EXACT_US < t_us < _ROUND_EXACT_US and l_us < _ROUND_EXACT_US):
        t_us = _canonical_us(ctx.frontier_time, t_us)
        l_us = _canonical_us(latency, l_us)
        if t_us < -MAX_TIME_US or t_us > MAX_TIME_US or l_us > MAX_TIME_US:
            raise ValueError(
                "scheduling context frontier_time and latency_target must lie within 2**52 microseconds "
                f"(about 142 years) of 0, got {ctx!r}"
            )
    try:
        return (
            _pack(
                CONTEXT_VERSION,
                t_us,
                l_us,
                priority,
                path_us if path_us <= _U32_MAX else _U32_MAX,
                ctx.hops if ctx.hops <= _U16_MAX else _U16_MAX,
                ctx.trace_id,
                len(pipeline),
                len(tenant),
            )
            + pipeline
            + tenant
        )
    except struct.error as exc:  # a trace id outside 0..2**64-1, hops that are not an int
        raise ValueError(f"scheduling context cannot be encoded ({exc}): {ctx!r}") from None


def retrace(encoded: bytes, trace_id: int) -> bytes:
    """``encoded`` (from :func:`encode_context`) with ``trace_id`` in place of its trace id.

    Records that share a context differ in their header only by the trace id, so a sink encodes the
    shared context once and derives each record's bytes with two slices and a pack. Raises
    :class:`ValueError` for a trace id outside 0..2**64-1, as :func:`encode_context` does.
    """
    before, after = retrace_parts(encoded)
    try:
        return before + _pack_trace(trace_id) + after
    except struct.error as exc:
        raise ValueError(f"trace id cannot be encoded ({exc}): {trace_id!r}") from None


def retrace_parts(encoded: bytes) -> tuple[bytes, bytes]:
    """The bytes of ``encoded`` (from :func:`encode_context`) before and after its trace id.

    ``before + pack_trace_id(trace_id) + after`` is ``retrace(encoded, trace_id)``: a sink stamping
    many results of one context splits its bytes once and packs only the trace id per result.
    """
    return encoded[:_TRACE_AT], encoded[_TRACE_END:]


pack_trace_id: Callable[[int], bytes] = _pack_trace
"""A trace id's eight bytes in the ``cadenza-ctx`` header (see :func:`retrace_parts`), the C
function itself (no Python frame per result); :class:`struct.error` for one outside 0..2**64-1."""


def _canonical_us(seconds: float, rounded: int) -> int:
    """The microsecond count whose decoding is exactly ``seconds``, if one is next to ``rounded``.

    Beyond 2**51 us (the year 2041) ``round(seconds * 1e6)`` can miss a decoded value by one, since
    the division on decode and the multiplication here each round; checking the neighbours keeps
    ``encode(decode(x)) == x`` for every valid header, so contexts pass through hops unchanged.
    """
    if rounded / _US == seconds:
        return rounded
    if (rounded + 1) / _US == seconds:
        return rounded + 1
    if (rounded - 1) / _US == seconds:
        return rounded - 1
    return rounded


def decode_context(data: bytes | bytearray | memoryview | None) -> SchedulingContext | None:
    """Parse a ``cadenza-ctx`` header value; return ``None`` for anything that is not a valid context.

    ``None`` covers a missing header, an empty, truncated, oversized or padded value, an unknown
    version, ids that are not UTF-8, a negative latency target, times beyond ``MAX_TIME_US`` and a
    non-finite priority. It never raises, whatever it is given (a ``str`` from a sloppy client
    included), so the fetch loop needs no ``try``.
    """
    if data is None:
        return None
    try:
        size = len(data)
        if size < _FIXED_SIZE or size > MAX_CONTEXT_BYTES:
            return None
        raw: bytes = data if type(data) is bytes else bytes(data)  # size is bounded, so copying is too
        if raw[0] != CONTEXT_VERSION:
            return None
        _, t_us, l_us, priority, path_us, hops, trace_id, n_pipeline, n_tenant = _unpack_from(raw)
        if (
            size != _FIXED_SIZE + n_pipeline + n_tenant
            or not (0 <= l_us <= MAX_TIME_US and -MAX_TIME_US <= t_us <= MAX_TIME_US)
            or not _isfinite(priority)
        ):
            return None
        id_bytes = raw[_ID_LENGTHS_AT:]
        ids = _id_cache.get(id_bytes)
        if ids is None:
            end_pipeline = _FIXED_SIZE + n_pipeline
            ids = (raw[_FIXED_SIZE:end_pipeline].decode(), raw[end_pipeline:].decode())
            if len(_id_cache) >= _ID_CACHE_SIZE:
                _id_cache.clear()
            _id_cache[id_bytes] = ids
        return SchedulingContext(
            ids[0], ids[1], t_us / _US, l_us / _US, priority, path_us / _US, hops, trace_id
        )
    except (TypeError, ValueError, struct.error):  # UnicodeDecodeError is a ValueError
        return None


class ContextDecodeStats:
    """Counts how incoming headers were handled, so a garbled producer shows up on a dashboard.

    A missing header is normal for records read straight from a source topic; a garbled one means
    some producer writes bad headers, and those records lose their deadline (they get a fresh one).
    """

    __slots__ = ("decoded", "garbled", "missing")

    def __init__(self) -> None:
        self.decoded = 0
        self.missing = 0
        self.garbled = 0

    def decode(self, data: bytes | bytearray | memoryview | None) -> SchedulingContext | None:
        """:func:`decode_context`, counting the outcome."""
        ctx = decode_context(data)
        if ctx is not None:
            self.decoded += 1
        elif data is None:
            self.missing += 1
        else:
            self.garbled += 1
        return ctx

    @property
    def fresh(self) -> int:
        """Records that needed a fresh source context (missing plus garbled headers)."""
        return self.missing + self.garbled

    def as_dict(self) -> dict[str, int]:
        return {"decoded": self.decoded, "missing": self.missing, "garbled": self.garbled}

    def __repr__(self) -> str:
        return f"ContextDecodeStats(decoded={self.decoded}, missing={self.missing}, garbled={self.garbled})"


def decode_or_fresh(
    data: bytes | bytearray | memoryview | None,
    make_fresh: Callable[[], SchedulingContext],
    stats: ContextDecodeStats | None = None,
) -> tuple[SchedulingContext, bool]:
    """Return ``(context, fresh)``: the decoded context, or ``make_fresh()`` and ``True`` if unusable.

    ``make_fresh`` is normally ``lambda: policy.build_ctx_at_source(info)``: a record whose header
    cannot be trusted is treated as if it had just entered from a source.
    """
    ctx = decode_context(data) if stats is None else stats.decode(data)
    if ctx is not None:
        return ctx, False
    return make_fresh(), True
