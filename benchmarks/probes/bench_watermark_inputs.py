"""CPU per record of the steps that keep a watermark over many inputs, by the number of inputs.

A window after a ``key_by`` has one watermark input per upstream partition, and so does the entry of
a ``key_by`` after a ``key_by`` (its input partition's frontier, see ``docs/concepts/watermarks.md``).
Both ask for their watermark at every record. This builds the pipeline's tasks as the worker does (its
idle clock, a 30 s idle timeout; what the steps produce is dropped) and runs records through one task,
their upstream partitions taking turns with rising event times (each record raises the watermark
input that holds the watermark back: the case a full pass over the inputs pays most for):

- ``window``: source -> key_by -> 1 s tumbling count -> sink; the window's task;
- ``chain``: source -> key_by -> map -> key_by -> window; the task between the two key_bys.

Thread CPU time, median and minimum over the rounds, us per record.
``PYTHONPATH=<tree> python benchmarks/probes/bench_watermark_inputs.py --out DIR`` measures another tree.

    python benchmarks/probes/bench_watermark_inputs.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result
from confluent_kafka import Message

from cadenza.infra.kafka.clients import ClientErrors
from cadenza.pipelines import Pipeline, Tumbling
from cadenza.worker.engine.counters import WorkerCounters
from cadenza.worker.engine.idle_clock import IdleClock
from cadenza.worker.engine.output import Output
from cadenza.worker.engine.task import Task
from cadenza.worker.engine.tasks import build_tasks
from cadenza.worker.engine.unit import Unit

MODES = ("window", "chain")


def _user(value: dict[str, Any]) -> str:
    return str(value["u"])


def _everyone(value: dict[str, Any]) -> str:
    return "all"


def _event_time(value: dict[str, Any]) -> float:
    return float(value["t"])


class _Discard:
    """A producer that drops what it is given: what the steps produce is not what is measured."""

    def produce(self, *args: Any, **kwargs: Any) -> None:
        pass

    def poll(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def flush(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def task(mode: str, inputs: int) -> Task:
    pipeline = Pipeline("inputs", tenant="t", latency_target="1s")
    stream = pipeline.source("events", timestamp=_event_time).key_by(_user)
    if mode == "chain":
        stream = stream.map(lambda value: value).key_by(_everyone)
    stream.window(Tumbling("1s")).count().sink("counts")
    graph = pipeline.compile()
    counts = {"events": inputs, "counts": 1, str(graph.late_topic): 1}
    counts.update({str(node.repartition_topic): inputs for node in graph.nodes if node.repartition_topic})
    output = Output.over(_Discard(), ClientErrors("producer"))
    clock = IdleClock()
    tasks = build_tasks(
        graph, output, WorkerCounters(), partitions=counts, idle_timeout=30.0, clock=clock.now
    )
    wanted = "keyed" if mode == "chain" else "windows"
    return next(t for t in tasks if t.subtopology.input_kind == "repartition" and getattr(t, wanted))


def measure(mode: str, inputs: int, records: int, rounds: int) -> list[float]:
    runner = task(mode, inputs)
    entry = runner.subtopology.entry
    message = Message(topic="r", partition=0, offset=0, value=b"{}")  # read by no step here
    per_record: list[float] = []
    for round_ in range(rounds + 1):  # the first round warms up
        units = []
        for i in range(records):
            n = round_ * records + i
            at = 1.0 + n * 0.001
            unit = Unit("inputs", entry, "r", 0, n, f"k{i % 50}", {"u": "a", "t": at}, at, message)
            unit.origin = (i % inputs, n // inputs, 0, at)
            units.append(unit)
        run = runner.run
        started = time.thread_time()
        for unit in units:
            run(unit)
        per_record.append((time.thread_time() - started) / records * 1e6)
    return per_record[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", default="4,16,48", help="upstream partitions, comma-separated")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    counts = [int(n) for n in args.inputs.split(",")]
    results: dict[str, dict[str, dict[str, float]]] = {}
    for mode in MODES:
        results[mode] = {}
        for inputs in counts:
            runs = measure(mode, inputs, args.records, args.rounds)
            results[mode][str(inputs)] = {
                "median_us": round(statistics.median(runs), 3),
                "min_us": round(min(runs), 3),
            }
            median = statistics.median(runs)
            print(f"{mode:7s} {inputs:3d} inputs  {median:7.2f} us/record (min {min(runs):.2f})")
    name = f"watermark_inputs{'-' + args.label if args.label else ''}.json"
    result = {"benchmark": "watermark_inputs_us_per_record", "records": args.records, "modes": results}
    write_result(args.out, name, {**result, **environment()})


if __name__ == "__main__":
    main()
