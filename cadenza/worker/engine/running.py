"""The words that say which record the engine runs: what a crash slot maps to a file.

The executor stores the running record's offset (and its partition's tag) into two machine words
before and after each record. With a crash slot (:mod:`cadenza.worker.reliability.crash_slot`) the
words are a shared memory mapping that outlives the process, so the worker's successor knows the
record a death interrupted; without one they are a private buffer, so the hot path stores
unconditionally. The engine owns the layout, the slot only maps it.
"""

from __future__ import annotations

__all__ = ["IDLE", "UNKNOWN", "WORDS", "idle_words"]

#: Words in the block: running offset, its partition's tag, and the hung record's pair.
WORDS = 4
#: The offset word when no record runs (no Kafka offset is negative).
IDLE = -1
#: The partition word of a partition the slot cannot name; with any offset: "running, unknown".
UNKNOWN = 0


def idle_words() -> memoryview:
    """A private buffer shaped like a slot's words: stores into it go nowhere."""
    words = memoryview(bytearray(8 * WORDS)).cast("q")
    words[0] = words[2] = IDLE
    return words
