"""The CPU-heavy per-record work of tenant BA in S1, identical in cadenza's venv and in faust's.

Pure standard library (no dependencies, nothing from cadenza: the checkout's
``benchmarks/scenarios/peers/cpu_work.py`` loads this file by path inside faust's venv). ``burn`` is
deterministic and linear in ``iterations``, so the S1 harness can calibrate ``iterations`` to a target
cost per record (e.g. 0.3-1 ms) on the machine it runs on and every system then pays the same cost for
the same record; ``burn_cpu`` spends a fixed CPU time instead, whatever the host's speed.
"""

from __future__ import annotations

import hashlib
import math
import time

__all__ = ["burn", "burn_cpu"]


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


def burn_cpu(payload: str, seconds: float) -> int:
    """Hash ``payload`` until the calling thread has used ``seconds`` of CPU time; the payload's score.

    A job of a fixed CPU time rather than a fixed count of rounds: this host runs at one of two
    speeds about 1.9x apart and switches between them several times a second (measured 2026-12-06),
    so a count calibrated once costs what the speed of the moment says, and a phase's load moves with
    the mix of speeds it met. Counted in the thread's CPU time, a job costs the same whatever the
    speed, and only a core taken by another process still moves the load.
    """
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds}")
    end = time.thread_time() + seconds
    digest = payload.encode()
    while time.thread_time() < end:
        for _ in range(8):
            digest = hashlib.sha256(digest).digest()
    return int.from_bytes(hashlib.blake2b(payload.encode(), digest_size=4).digest(), "big")
