"""Carrying out migration plans through the ownership topic: the controller's side of a move.

:func:`cadenza.scaling.plan` says which partitions move in which step; :class:`PlanMover` starts each
step's moves (a ``warming`` claim each, :mod:`cadenza.scaling.ownership`) and waits until the workers
have finished them (each partition ``owned`` by its new owner) before it starts the next. A step that
does not finish in ``step_timeout`` is cancelled: its unfinished partitions go back to their old
owners at the next epoch (the old owner takes a released partition back by restoring it), and
:class:`MigrationTimeoutError` says which.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from cadenza.errors import CadenzaError
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import ensure_topics
from cadenza.scaling.migration import plan
from cadenza.scaling.ownership import OWNERSHIP_TOPIC, Claim, OwnershipLog, Partition, ownership_topic_spec
from cadenza.settings import KafkaSettings

__all__ = ["MigrationTimeoutError", "PlanMover", "StepResult"]

_log = logging.getLogger("cadenza.scaling")


class MigrationTimeoutError(CadenzaError):
    """A step's moves did not finish in time; they were cancelled (the partitions stay put)."""


#: One finished step: its moves and how long it took, in seconds.
StepResult = tuple[dict[Partition, str], float]


class PlanMover:
    """Writes the ownership plan of one group and moves its partitions step by step."""

    def __init__(
        self,
        settings: KafkaSettings,
        group: str,
        *,
        topic: str = OWNERSHIP_TOPIC,
        step_timeout: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        ensure_topics(make_admin(settings), [ownership_topic_spec(topic)])
        self._log = OwnershipLog(settings, group, topic)
        self._step_timeout = step_timeout
        self._clock = clock

    def owners(self) -> dict[Partition, str]:
        """Who owns each partition now, as the plan says (read to its end)."""
        self._log.poll(0.05)
        if not self._log.caught_up:
            self._log.read_to_end()
        return self._log.owners()

    def place(self, owners: Mapping[Partition, str]) -> None:
        """Give partitions to owners outright, without a hand-over: for partitions nobody runs yet (a
        new pool) or whose owner is gone. A partition that changes owner goes to the next epoch."""
        known = self._log.claims
        claims = {
            partition: Claim(owner, known[partition].epoch + 1 if partition in known else 0)
            for partition, owner in owners.items()
            if partition not in known or known[partition] != Claim(owner, known[partition].epoch)
        }
        if claims:
            self._log.write(claims)
            self._log.poll(0.05)

    def migrate(
        self,
        target: Mapping[Partition, str],
        strategy: str = "fluid",
        *,
        progress: Callable[[str], None] | None = None,
    ) -> list[StepResult]:
        """Move from the current owners to ``target`` by ``plan(current, target, strategy)``."""
        current = self.owners()
        missing = [p for p in target if p not in current]
        if missing:
            raise ValueError(f"partitions {sorted(missing)} have no owner yet; place() them first")
        steps = plan({p: current[p] for p in target}, dict(target), strategy)
        done: list[StepResult] = []
        for index, moves in enumerate(steps, 1):
            started = self._clock()
            self._start(moves)
            self._wait(moves, started)
            took = self._clock() - started
            done.append((moves, took))
            if progress is not None:
                names = ", ".join(f"{t}[{p}] -> {w}" for (t, p), w in moves.items())
                progress(f"step {index}/{len(steps)}: {names} in {took:.2f} s")
        return done

    def _start(self, moves: Mapping[Partition, str]) -> None:
        claims = self._log.claims
        self._log.write(
            {p: Claim(claims[p].owner, claims[p].epoch, "warming", to) for p, to in moves.items()}
        )

    def _wait(self, moves: Mapping[Partition, str], started: float) -> None:
        claims = self._log.claims
        while True:
            self._log.poll(0.05)
            left = [
                p for p, to in moves.items() if not (claims[p].phase == "owned" and claims[p].owner == to)
            ]
            if not left:
                return
            if self._clock() - started > self._step_timeout:
                back = {p: Claim(claims[p].owner, claims[p].epoch + 1) for p in left}
                self._log.write(back)
                raise MigrationTimeoutError(
                    f"moves of {sorted(left)} did not finish within {self._step_timeout:g} s (last "
                    f"claims: {[claims[p] for p in left]}); cancelled, they stay with their old owners"
                )

    def close(self) -> None:
        self._log.close()
