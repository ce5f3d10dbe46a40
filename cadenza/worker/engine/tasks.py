"""The tasks of a pipeline: one per sub-topology, its operators built by the step builders.

:class:`~cadenza.worker.engine.task_builder.TaskBuilder` walks a sub-topology; the operator of each
step comes from the builder its kind registered (:mod:`.step_builders`). This module brings the two
together, so that neither imports the other at run time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from cadenza.pipelines import PipelineGraph
from cadenza.schemas import SchemaRegistryLike
from cadenza.state import StoreFactory
from cadenza.state.safe_codec import register_function_models, register_model
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.dead_letter import DeadLetters
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.lessees.hub import LesseeHub
from cadenza.worker.engine.operators.base import Operator
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.step_builders import STEP_BUILDERS
from cadenza.worker.engine.task import Task
from cadenza.worker.engine.task_builder import OperatorHooks, TaskBuilder, default_stores
from cadenza.worker.engine.topology import SubTopology, split

__all__ = ["build_tasks"]


def build_tasks(
    graph: PipelineGraph,
    output: Output,
    counters: WorkerCounters,
    subtopologies: list[SubTopology] | None = None,
    *,
    idle_timeout: float | None = None,
    store_factory: StoreFactory | None = None,
    registry_client: SchemaRegistryLike | None = None,
    partitions: Mapping[str, int] | None = None,
    hooks: OperatorHooks | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    lessees: LesseeHub | None = None,
    read_clock: IdleClock | None = None,
) -> list[Task]:
    """One task per sub-topology of ``graph`` (see :func:`cadenza.worker.engine.topology.split`).

    ``store_factory``: where stateful steps keep state (in memory when not given).
    ``registry_client``: Avro sources then read the Schema Registry wire format (subject
    ``<topic>-value``). ``partitions``: topic -> partition count, from which windows and joins know
    all their watermark inputs up front (without it they learn them from the records). ``hooks``:
    contexts and metrics for the steps that write (none: they stamp and count nothing). ``clock``:
    what watermark idle timeouts are measured on (a test driver passes its virtual clock).
    ``wall_clock``: what process steps' wall-clock timers are measured on (epoch seconds).
    ``lessees``: where steps declared with ``parallel=`` lease their lessees (none: every step runs
    on the calling thread, as declared with ``parallel=1``); ``read_clock``: the idle clock their
    releases stamp.
    """
    subtopologies = split(graph) if subtopologies is None else subtopologies
    for functions in graph.functions.values():  # the models repartition and changelog bytes may name
        register_model(functions.value_model)
        register_model(functions.key_model)
        for fn in (functions.fn, functions.init, functions.add, functions.merge, functions.result):
            register_function_models(fn)
    dead = DeadLetters(
        graph.dead_letter_topic,
        graph.late_topic,
        output,
        counters,
        pipeline=graph.name,
        stop_on_error=graph.on_error == "stop",
        metrics=None if hooks is None else hooks.dead_letters(graph),
    )
    stores = store_factory if store_factory is not None else default_stores
    appearances: dict[str, int] = {}
    for sub in subtopologies:
        for node_id in sub.nodes:
            appearances[node_id] = appearances.get(node_id, 0) + 1
    shared_ids = {node_id for node_id, count in appearances.items() if count > 1}
    shared: dict[str, Operator] = {}
    return [
        TaskBuilder(
            graph,
            sub,
            output=output,
            counters=counters,
            dead=dead,
            idle_timeout=idle_timeout,
            shared=shared,
            shared_ids=shared_ids,
            stores=stores,
            registry_client=registry_client,
            subtopologies=subtopologies,
            partitions=partitions,
            hooks=hooks,
            clock=clock,
            wall_clock=wall_clock,
            builders=STEP_BUILDERS,
            lessees=lessees,
            read_clock=read_clock,
        ).task()
        for sub in subtopologies
    ]
