"""A paired A/B of the hot path's two stages against another checkout's source of the same functions.

``bench_hot_path.py`` compares runs made in separate processes and on separate workers; on a shared
2-core machine their spread (about 10 %) hides a change of 1-2 %. This script makes the comparison
paired instead: one started worker, the same in-memory records, and per round both versions of
``Worker.admit`` and ``Executor.run_quantum`` (this tree's, and the ones compiled from ``--base``, a
checkout of another commit, e.g. ``git worktree add /tmp/base main``), in alternating order, each
timed by the worker thread's CPU time. It reports the medians per stage and per record.

    python benchmarks/probes/bench_hot_path_ab.py --base /tmp/base --rounds 60 --records 5000
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from bench_hot_path import messages, started_worker

import cadenza.worker.engine.executor as executor_module
import cadenza.worker.runtime as runtime_module
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.engine.executor import Executor

Variant = tuple[Callable[..., Any], Callable[..., Any]]


def compiled_method(path: Path, cls: str, name: str, module: ModuleType) -> Callable[..., Any]:
    """Method ``cls.name`` from the source file ``path``, compiled in ``module``'s namespace (so it
    sees this tree's imports: only the method body differs)."""
    text = path.read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    source = textwrap.dedent(ast.get_source_segment(text, item) or "")
                    namespace: dict[str, Any] = {}
                    code = compile("from __future__ import annotations\n" + source, str(path), "exec")
                    exec(code, module.__dict__, namespace)  # the benchmark's own input
                    function: Callable[..., Any] = namespace[name]
                    return function
    raise LookupError(f"{cls}.{name} not found in {path}")


def variant(root: Path) -> Variant:
    return (
        compiled_method(
            root / "cadenza/worker/engine/executor.py", "Executor", "run_quantum", executor_module
        ),
        compiled_method(root / "cadenza/worker/runtime.py", "Worker", "admit", runtime_module),
    )


def measure(
    settings: KafkaSettings, policy: str, variants: dict[str, Variant], rounds: int, records: int
) -> dict[str, dict[str, list[float]]]:
    """Per variant and stage (``admit``, ``run``, ``total``, flush included): ns per record per round."""
    worker, source = started_worker(settings, policy, records, prefix="ab")
    output = worker._output
    assert output is not None
    names = list(variants)
    found: dict[str, dict[str, list[float]]] = {name: {"admit": [], "run": [], "total": []} for name in names}
    original = Executor.run_quantum, Worker.admit
    try:
        for round_ in range(rounds + 1):  # round 0 warms up
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                Executor.run_quantum, Worker.admit = variants[name]  # type: ignore[method-assign]
                batch = messages(source, records)
                started = time.thread_time()
                worker.admit(batch)
                admitted = time.thread_time()
                worker.run_for(3600.0)
                ran = time.thread_time()
                output.flush()
                if round_:
                    scale = 1e9 / records
                    found[name]["admit"].append((admitted - started) * scale)
                    found[name]["run"].append((ran - admitted) * scale)
                    found[name]["total"].append((time.thread_time() - started) * scale)
    finally:
        Executor.run_quantum, Worker.admit = original  # type: ignore[method-assign]
        worker.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="root of the other checkout")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--policies", default="cameo,fifo")
    args = parser.parse_args()
    variants = {"base": variant(args.base), "this": variant(Path(__file__).resolve().parents[2])}
    with EmbeddedBroker() as broker:
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        for policy in args.policies.split(","):
            found = measure(settings, policy, variants, args.rounds, args.records)
            for stage in ("admit", "run", "total"):
                base = statistics.median(found["base"][stage])
                this = statistics.median(found["this"][stage])
                print(
                    f"{policy:6s} {stage:5s} base {base:8.0f} ns/record  this {this:8.0f} ns/record  "
                    f"{this - base:+6.0f} ns ({(this / base - 1) * 100:+.1f} %)"
                )


if __name__ == "__main__":
    main()
