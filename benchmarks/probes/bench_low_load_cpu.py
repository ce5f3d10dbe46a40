"""A worker's CPU at low load: S1's pipelines with LS live at 300 records/s and BA at a trickle.

At full load a worker's loop gathers many records per round; at low load every fetch response ends
a wait and makes a round of its own, so the costs paid per round, per admitted batch and per quantum
are paid for a record or two. This measures what that costs, for one or more source trees side by
side (``git archive <commit> | tar -x -C DIR``), alternating them, each run on a fresh embedded
broker: the worker process's CPU seconds per second (from ``/proc``, split by thread name, so the
Python thread and librdkafka's threads are apart) and the broker's, over ``--seconds`` after an
8 s warm-up, with the outputs counted to show that every tree did the same work.

    cd benchmarks/probes && python bench_low_load_cpu.py --trees /tmp/base,.. --pairs 3 --out DIR
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, stop_process, write_result
from bench_s1_ab import pipelines_of

from cadenza.demo.machine import process_cpu_seconds
from cadenza.demo.s1_config import PARTITIONS, S1Config
from cadenza.demo.s1_io import OutputReader, Topics, live_input
from cadenza.infra.broker.embedded import EmbeddedBroker
from cadenza.infra.kafka.clients import make_admin
from cadenza.infra.kafka.topics import ensure_topics
from cadenza.settings import KafkaSettings

_HZ = os.sysconf("SC_CLK_TCK")
WARMUP_S = 8.0


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process by thread name (digits folded: librdkafka names a thread per broker)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = re.sub(r"[0-9]+", "#", (task / "comm").read_text().strip())
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _HZ
    return out


def cpu_of(pid: int) -> float:
    used = process_cpu_seconds(pid)
    if used is None:
        raise SystemExit(f"process {pid} is gone before its CPU was read")
    return used


def one_run(tree: Path, ba_rate: float, seconds: float) -> dict[str, Any]:
    """One worker of ``tree`` on a fresh broker, fed live; its CPU over ``seconds`` after the warm-up."""
    config = S1Config()
    with EmbeddedBroker() as broker:
        assert broker.pid is not None  # started
        settings = KafkaSettings.load(bootstrap_servers=broker.bootstrap_servers)
        run = f"lowcpu{uuid.uuid4().hex[:6]}"
        topics = Topics.fresh(run)
        ensure_topics(make_admin(settings), topics.specs(PARTITIONS))
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "S1_RUN": run,
            "S1_LS_IN": topics.ls_in,
            "S1_LS_OUT": topics.ls_out,
            "S1_BA_IN": topics.ba_in,
            "S1_BA_OUT": topics.ba_out,
            "S1_LS_TARGET": str(config.ls_target),
            "S1_BA_TARGET": str(config.ba_target),
            "S1_CPU_ITERATIONS": "900",
        }
        command = [sys.executable, "-m", "cadenza", "worker", str(pipelines_of(tree)), "--policy", "cameo"]
        command += ["--group", f"s1-{run}", "--partitions", str(PARTITIONS)]
        worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        reader = OutputReader(settings, topics, PARTITIONS)
        stop = threading.Event()
        feed = (settings, topics, config, ba_rate, stop)
        sender = threading.Thread(target=live_input, args=feed, daemon=True)
        try:
            sender.start()
            deadline = time.monotonic() + 120
            while not reader.ls:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise SystemExit(f"the worker of {tree} produced nothing")
                time.sleep(0.1)
            time.sleep(WARMUP_S)
            threads0, broker0 = thread_cpu(worker.pid), cpu_of(broker.pid)
            worker0, ls0, ba0, at0 = cpu_of(worker.pid), len(reader.ls), len(reader.ba), time.monotonic()
            time.sleep(seconds)
            threads1, broker1 = thread_cpu(worker.pid), cpu_of(broker.pid)
            worker1, ls1, ba1, at1 = cpu_of(worker.pid), len(reader.ls), len(reader.ba), time.monotonic()
        finally:
            stop.set()
            sender.join(15)
            reader.close()
            stop_process(worker)
    elapsed = at1 - at0
    return {
        "tree": str(tree),
        "seconds": round(elapsed, 2),
        "worker_cpu_per_s": round((worker1 - worker0) / elapsed, 4),
        "worker_threads_cpu_per_s": {
            name: round((threads1.get(name, 0.0) - threads0.get(name, 0.0)) / elapsed, 4) for name in threads1
        },
        "broker_cpu_per_s": round((broker1 - broker0) / elapsed, 4),
        "ls_results_per_s": round((ls1 - ls0) / elapsed, 1),
        "ba_results_per_s": round((ba1 - ba0) / elapsed, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", required=True, help="comma-separated source trees, run alternately")
    parser.add_argument("--pairs", type=int, default=3, help="runs of each tree")
    parser.add_argument("--ba-rate", type=float, default=30.0, help="BA records/s (LS is S1's 300/s)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    runs: list[dict[str, Any]] = []
    for index in range(args.pairs):
        for tree in trees:
            result = one_run(tree, args.ba_rate, args.seconds)
            runs.append(result)
            python = result["worker_threads_cpu_per_s"].get("python", 0.0)
            print(
                f"[{index + 1}/{args.pairs}] {tree}: worker {result['worker_cpu_per_s']:.3f} CPU s/s "
                f"(Python thread {python:.3f}), broker {result['broker_cpu_per_s']:.3f}, "
                f"LS results/s {result['ls_results_per_s']}, BA {result['ba_results_per_s']}",
                flush=True,
            )
    medians = {
        str(tree): {
            key: statistics.median(r[key] for r in runs if r["tree"] == str(tree))
            for key in ("worker_cpu_per_s", "broker_cpu_per_s", "ls_results_per_s", "ba_results_per_s")
        }
        | {
            "python_thread_cpu_per_s": statistics.median(
                r["worker_threads_cpu_per_s"].get("python", 0.0) for r in runs if r["tree"] == str(tree)
            )
        }
        for tree in trees
    }
    for name, row in medians.items():
        print(f"median {name}: " + ", ".join(f"{k} {v:g}" for k, v in row.items()))
    result = {
        "benchmark": "low_load_cpu",
        "ls_rate": S1Config().ls_rate,
        "ba_rate": args.ba_rate,
        "runs": runs,
        "medians": medians,
        **environment(),
    }
    write_result(args.out, "low_load_cpu.json", result)


if __name__ == "__main__":
    main()
