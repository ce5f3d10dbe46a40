"""S1 on equal terms against an older tree: this checkout's ``cameo`` worker beside the worker of
``--base`` (a checkout, or a ``git archive``, of an older commit), both driven by this harness.

Two trees' S1 runs, each measured with its own harness, mix the worker with the harness (the
generator's producers, a broker per run) and with the machine's drift between the runs. Here the
base worker runs as one more S1 system (a peer of :func:`cadenza.demo.s1.run_benchmark`): the same
generator and calibration, a fresh broker per run for both, and repetitions interleaved in rotating
order. The base worker runs its own tree's S1 pipelines module (``cadenza/demo/s1_pipelines.py``, or
``benchmarks/s1_pipelines.py`` in trees from before the demo moved into the package), which declares
the same two pipelines.

    cd benchmarks/probes && python bench_s1_ab.py --base /tmp/base --label 7056ee4 --repetitions 8 --out DIR

``--load`` sets BA's mean input as in ``cadenza bench s1 --load`` (0.75 by default).

Writes ``s1.json`` and ``s1.png`` (the harness's, both systems) and ``s1_ab.json``: per repetition,
each system's LS and BA deadline-met ratios and LS p99, with the medians and the paired differences.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import machine_and_commit, write_result

from cadenza.demo.s1 import run_benchmark
from cadenza.demo.s1_config import S1Config
from cadenza.demo.s1_process import PeerCommand, PeerRun

THIS = "cameo"


def pipelines_of(base: Path) -> Path:
    """The base tree's S1 pipelines module (where it lived in that tree)."""
    for candidate in (base / "cadenza/demo/s1_pipelines.py", base / "benchmarks/s1_pipelines.py"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"{base} has no S1 pipelines module (cadenza/demo or benchmarks/s1_pipelines.py)")


def base_worker(base: Path, config: S1Config) -> PeerCommand:
    """The command that runs ``base``'s worker under ``cameo``, as the harness runs this tree's."""
    pipelines = pipelines_of(base)

    def command(run: PeerRun) -> list[str]:
        topics = run.topics
        return [
            "env",
            f"PYTHONPATH={base}",
            f"S1_RUN={run.run}",
            f"S1_LS_IN={topics.ls_in}",
            f"S1_LS_OUT={topics.ls_out}",
            f"S1_BA_IN={topics.ba_in}",
            f"S1_BA_OUT={topics.ba_out}",
            f"S1_LS_TARGET={config.ls_target}",
            f"S1_BA_TARGET={config.ba_target}",
            f"S1_CPU_ITERATIONS={run.iterations}",
            sys.executable,
            "-m",
            "cadenza",
            "worker",
            str(pipelines),
            "--policy",
            THIS,
            "--group",
            f"s1-{run.run}",
            "--partitions",
            str(run.partitions),
        ]

    return command


def paired(runs: dict[str, list[dict[str, Any]]], base: str) -> dict[str, Any]:
    """Per repetition both systems' figures; medians; this tree minus the base, per repetition."""
    rows: list[dict[str, list[float | None]]] = []
    for ours, theirs in zip(runs.get(THIS, []), runs.get(base, []), strict=False):
        rows.append(
            {
                "ls_met": [ours["LS"]["deadline_met_ratio"], theirs["LS"]["deadline_met_ratio"]],
                "ls_p99_ms": [ours["LS"]["p99_ms"], theirs["LS"]["p99_ms"]],
                "ba_met": [ours["BA"]["deadline_met_ratio"], theirs["BA"]["deadline_met_ratio"]],
            }
        )
    summary: dict[str, Any] = {"repetitions": rows}
    for key in ("ls_met", "ls_p99_ms", "ba_met"):
        this_tree = [value for row in rows if (value := row[key][0]) is not None]
        base_tree = [value for row in rows if (value := row[key][1]) is not None]
        diffs = [a - b for row in rows if (a := row[key][0]) is not None and (b := row[key][1]) is not None]
        summary[key] = {
            "this": statistics.median(this_tree) if this_tree else None,
            "base": statistics.median(base_tree) if base_tree else None,
            "median_difference": statistics.median(diffs) if diffs else None,
            "this_better_in": sum(d > 0 for d in diffs) if key != "ls_p99_ms" else sum(d < 0 for d in diffs),
            "base_better_in": sum(d < 0 for d in diffs) if key != "ls_p99_ms" else sum(d > 0 for d in diffs),
        }
    return summary


def at_least_one(text: str) -> int:
    """``--repetitions``: a paired comparison needs at least one pair."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"at least 1, got {number}")
    return number


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base", type=Path, required=True, help="a checkout or git archive of the older tree"
    )
    parser.add_argument("--label", default="base", help="the base's name in the results (its commit)")
    parser.add_argument("--repetitions", type=at_least_one, default=8)
    parser.add_argument(
        "--load", type=float, default=S1Config.load, help="BA's mean input over its calibrated capacity"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    base = args.base.resolve()
    name = f"{THIS}-{args.label}"
    config = S1Config(systems=(THIS, name), repetitions=args.repetitions, load=args.load)
    result = run_benchmark(args.out, config=config, peers={name: base_worker(base, config)})
    write_result(
        args.out,
        "s1_ab.json",
        {
            "base": {"path": str(base), "label": args.label},
            **paired(result["runs"], name),
            **machine_and_commit(),
        },
    )


if __name__ == "__main__":
    main()
