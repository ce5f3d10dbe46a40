"""The CPU-heavy per-record work of tenant BA in S1, identical in cadenza's venv and in faust's.

Pure standard library (no dependencies, nothing from cadenza: the checkout's
``benchmarks/peers/cpu_work.py`` loads this file by path inside faust's venv), deterministic, and
linear in ``iterations``, so the S1 harness can calibrate ``iterations`` to a target cost per record
(e.g. 0.3-1 ms) on the machine it runs on and every system then pays the same cost for the same record.
"""

from __future__ import annotations

import hashlib

__all__ = ["burn"]


def burn(payload: str, iterations: int) -> int:
    """Hash ``payload`` ``iterations`` times (each round hashes the previous digest); a 32-bit score.

    ``iterations`` below 1 does no hashing and scores the payload's own bytes, so a calibration of 0
    still yields a defined score rather than an error.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    digest = payload.encode()
    for _ in range(iterations):
        digest = hashlib.sha256(digest).digest()
    return int.from_bytes(hashlib.blake2b(digest, digest_size=4).digest(), "big")
