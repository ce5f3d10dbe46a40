"""A hand-written Avro encoder for ``spans.avsc``: the span emitter's sender encodes every sampled span.

fastavro's ``schemaless_writer`` re-parses the schema on every call, and its unions and logical types
cost more; on the development machine it takes about 13 us per span
(``benchmarks/probes/bench_spans.py``).
The sender shares the GIL with the executor, so at sampling 1.0 that alone would be more than the
executor's own work per record. This writer produces the same bytes in a few microseconds: the four
strings (pipeline, tenant, operator, worker) are encoded once per operator and cached, the sample
ratio once per writer, and the rest is three zigzag varints, three packed doubles and two union tags.

It is tied to the schema's field order and types; ``tests/infra/metrics/test_span_writer.py`` checks
its output byte for byte against fastavro's for random spans and pins the schema's fingerprint, so a
change to ``spans.avsc`` fails the tests until this writer follows it. Avro binary encoding:
https://avro.apache.org/docs/1.11.1/specification/#binary-encoding
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from cadenza.schemas.errors import EncodeError

if TYPE_CHECKING:
    from cadenza.infra.metrics.spans import SpanRun

__all__ = ["SPANS_AVSC_FINGERPRINT", "SpanWriter"]

SPANS_AVSC_FINGERPRINT = "a819c07d63cb43ef"
"""Hex CRC-64-AVRO fingerprint of the ``spans.avsc`` this writer encodes (checked by the tests)."""

_MASK = (1 << 64) - 1
_SIGN = 1 << 63
_LONG_MAX = 1 << 63
_INT_MAX = 1 << 31
_SMALL = [bytes((i,)) for i in range(128)]
# For a varint of ``size`` bytes: the continuation bit set in every byte but the last.
_CONTINUATION = [0] + [sum(0x80 << (8 * i) for i in range(size - 1)) for size in range(1, 11)]
_pack_double = struct.Struct("<d").pack
_pack_two_doubles = struct.Struct("<dd").pack
_NULL = b"\x00"  # union branch 0: null
_SOME_DOUBLE = b"\x02"  # union branch 1, then the double
_MET = b"\x02\x01"  # union branch 1, boolean true
_MISSED = b"\x02\x00"  # union branch 1, boolean false
_PREFIX_CACHE_SIZE = 4096


def _varint(value: int) -> bytes:
    """Unsigned LEB128 of ``0 <= value < 2**64``: 7-bit groups spread into bytes in one expression."""
    if value < 0x80:
        return _SMALL[value]
    size = (value.bit_length() + 6) // 7
    spread = (
        (value & 0x7F)
        | ((value & 0x3F80) << 1)
        | ((value & 0x1FC000) << 2)
        | ((value & 0xFE00000) << 3)
        | ((value & 0x7F0000000) << 4)
        | ((value & 0x3F800000000) << 5)
        | ((value & 0x1FC0000000000) << 6)
        | ((value & 0xFE000000000000) << 7)
        | ((value & 0x7F00000000000000) << 8)
        | ((value & 0x8000000000000000) << 9)
        | _CONTINUATION[size]
    )
    return spread.to_bytes(size, "little")


def _long(value: int) -> bytes:
    """Avro ``long`` (or ``int``): zigzag, then varint. The caller checks the range."""
    return _varint(value << 1 if value >= 0 else ((-value) << 1) - 1)


def _string(value: str) -> bytes:
    data = value.encode()
    return _long(len(data)) + data


class SpanWriter:
    """Encodes runs of one worker, at one sampling ratio, as ``spans.avsc`` bodies.

    Not shared between threads (its prefix cache is unlocked); the emitter's sender owns one.
    """

    __slots__ = ("_prefixes", "_suffix", "sample_ratio", "worker_id")

    def __init__(self, worker_id: str, sample_ratio: float) -> None:
        self.worker_id = worker_id
        self.sample_ratio = sample_ratio
        self._prefixes: dict[tuple[str, str, str], bytes] = {}
        self._suffix = _pack_double(sample_ratio)

    def _prefix(self, tenant_id: str, pipeline_id: str, operator_id: str) -> bytes:
        try:
            prefix = b"".join(_string(s) for s in (pipeline_id, tenant_id, operator_id, self.worker_id))
        except (UnicodeError, AttributeError) as exc:
            raise EncodeError(f"cannot encode Span ids: {exc}", error_type=type(exc).__name__) from exc
        if len(self._prefixes) >= _PREFIX_CACHE_SIZE:
            self._prefixes.clear()
        self._prefixes[(tenant_id, pipeline_id, operator_id)] = prefix
        return prefix

    def encode_run(self, run: SpanRun) -> bytes:
        """The body of the span :meth:`Span.from_run <cadenza.infra.metrics.spans.Span.from_run>`
        derives from ``run``, byte for byte what ``encode_span`` writes for it."""
        tenant, pipeline, operator, partition, trace_id, wait, ran, t_f, target, at, sink = run
        prefix = self._prefixes.get((tenant, pipeline, operator))
        if prefix is None:
            prefix = self._prefix(tenant, pipeline, operator)
        deadline = t_f + target
        try:
            deadline_us = round(deadline * 1_000_000)
            at_us = round(at * 1_000_000)
            if sink:
                e2e = _SOME_DOUBLE + _pack_double(at - t_f)
                met = _MET if at <= deadline else _MISSED
            else:
                e2e = met = _NULL
            timing = _pack_two_doubles(wait, ran)
        except (OverflowError, ValueError, TypeError, struct.error) as exc:  # inf or NaN times
            raise EncodeError(f"cannot encode Span: {exc}", error_type=type(exc).__name__) from exc
        if not (
            -_LONG_MAX <= deadline_us < _LONG_MAX
            and -_LONG_MAX <= at_us < _LONG_MAX
            and -_INT_MAX <= partition < _INT_MAX
        ):
            raise EncodeError(
                f"cannot encode Span: time or partition out of range ({deadline}, {at}, {partition})",
                error_type="OverflowError",
            )
        trace = trace_id & _MASK
        # The long holding the unsigned id's bits, zigzagged: 2t for t < 2**63, else 2(2**64 - t) - 1.
        zigzag = trace << 1 if trace < _SIGN else ((_MASK + 1 - trace) << 1) - 1
        return b"".join(
            (
                prefix,
                _long(partition),
                _varint(zigzag),
                timing,
                e2e,
                _long(deadline_us),
                met,
                _long(at_us),
                self._suffix,
            )
        )
