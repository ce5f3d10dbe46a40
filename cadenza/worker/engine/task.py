"""The runnable form of a sub-topology: a :class:`Task`, what the worker decodes and runs records with.

A task is what is left of the pipeline graph at run time: a decoder for its input topic and the root
of a plain chain of operators, plus the handles the worker needs around the records (the stateful
steps that follow its input partitions, the stores to release, the key_bys that send progress, the
process steps whose timers it fires). Kept apart from how it is assembled
(:mod:`cadenza.worker.engine.task_builder`), which the worker needs only when its plan changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Message

from cadenza.state import StateStore
from cadenza.worker.engine.decode import Decoder
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.operators.parallel_step import ParallelOp
from cadenza.worker.engine.operators.process_step import ProcessOp
from cadenza.worker.engine.operators.progress import FrontierTap
from cadenza.worker.engine.operators.routing import KeyByOp
from cadenza.worker.engine.operators.stateful import StatefulStep
from cadenza.worker.engine.topology import SubTopology
from cadenza.worker.engine.unit import Unit

__all__ = ["Task"]


@dataclass
class Task:
    """A runnable sub-topology: decode records of ``subtopology.input_topic``, then run them.

    ``windows`` are the stateful steps whose state follows this task's input partitions (window
    aggregates and join inputs): restored when a partition is assigned, dropped when it goes.
    ``stores`` are the state stores of this task's steps (a shared join's store appears in both of
    its tasks); :meth:`close` releases them. ``keyed`` are its key_by steps that send progress
    records downstream: the worker calls their ``broadcast_progress`` every ``progress_interval``.
    ``processors`` are its process steps (also among ``windows``): the worker fires their wall-clock
    timers from its loop, and :meth:`close` closes their processors. ``frontier``: where a task
    reading a repartition topic learns how far its input partitions got for its key_bys (see
    :class:`~cadenza.worker.engine.operators.progress.FrontierTap`), if it has one.
    """

    subtopology: SubTopology
    decoder: Decoder
    root: Operator
    windows: list[StatefulStep] = field(default_factory=list)
    stores: list[StateStore] = field(default_factory=list)
    keyed: list[KeyByOp] = field(default_factory=list)
    processors: list[ProcessOp] = field(default_factory=list)
    frontier: FrontierTap | None = None
    #: Its steps declared with ``parallel=``: their calls run on lessees and are released in offset
    #: order per partition (so its records' offsets are tracked one by one, see ``inflight.py``).
    parallel: list[ParallelOp] = field(default_factory=list)

    def decode(self, message: Message, topic: str, partition: int, offset: int) -> Unit | None:
        return self.decoder.decode(message, topic, partition, offset)

    def run(self, unit: Unit) -> None:
        self.root.process(unit, unit.key, unit.value, unit.event_time, None)

    def close(self) -> None:
        """Close the processors and release the state stores (files of a RocksDB store); safe to call
        more than once."""
        for step in self.processors:
            step.close_processors()
        for store in self.stores:
            store.close()
