"""What compiling the worker's hot path with mypyc buys: ``pair_hot_path.py`` on a compiled copy of the
tree and on the checkout, alternately.

Issue 17 asks for a record under ``cameo`` to cost at most 1.5x an unscheduled one. The scheduler's
added work is spread over many small Python steps (contexts, queue runs, quanta, stamps, histogram
buckets), so compiled code is the obvious lever; this script measures it instead of assuming it.
It extracts the committed tree (``git archive HEAD``) into a temporary directory, compiles
``--modules`` there with mypyc (``build_ext --inplace``, the checkout is not touched), and runs
``pair_hot_path.py`` (paired batches: the time ratio cameo / unscheduled) in the compiled copy and
in the checkout, ``--repeats`` times each, alternating, so that both see the host's speed alike.

Two mechanical changes let mypyc build the copy, both applied here and nowhere else: a native tuple
returned from ``Quantum.__next__`` makes mypyc 2.4 emit C that does not compile (its
``tp_iternext`` slot), so the copy's ``__next__`` is annotated ``-> object``; and a compiled class
may not declare ``__slots__`` when it derives from an interpreted class (the operators derive from
``worker/operators/base.Operator``), so the copy's compiled operator modules and ``base.py`` lose
their ``__slots__`` (``worker/decode.py`` too: its classes are native and would not need it, but the
runs recorded in results/2026-12-01/NOTES.md were made that way). A C compiler is needed.

    cd benchmarks/probes && python compiled_hot_path.py --out DIR [--repeats 3] [--rounds 8] [--modules ...]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The scenarios' modules (``_common``, ``bench_hot_path``, ...) are in ../scenarios.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scenarios"))

from _common import environment, write_result

ROOT = Path(__file__).resolve().parents[2]
#: The admission, scheduling, execution and stamping path, and the decode and operator modules a
#: record of ``bench_hot_path.py``'s pipeline runs through (the last three also speed the
#: unscheduled path; leave them out with ``--modules`` to compile scheduling alone).
DEFAULT_MODULES = (
    "cadenza/scheduling/context.py",
    "cadenza/scheduling/scheduler.py",
    "cadenza/worker/engine/admission.py",
    "cadenza/worker/engine/context_stamps.py",
    "cadenza/worker/engine/executor.py",
    "cadenza/worker/engine/inflight.py",
    "cadenza/worker/engine/unit.py",
    "cadenza/worker/runtime.py",
    "cadenza/worker/engine/decode.py",
    "cadenza/worker/engine/operators/stateless.py",
    "cadenza/worker/engine/operators/routing.py",
)
#: The signature mypyc 2.4 cannot compile (see the module docstring).
NATIVE_TUPLE_NEXT = "def __next__(self) -> tuple[SchedulingContext, T]:"
_SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify
setup(name="cadenza-compiled-copy", packages=[], ext_modules=mypycify(sys.argv.pop(1).split(), opt_level="3"))
"""


def _without_slots(path: Path) -> None:
    """Replace each ``__slots__ = ...`` statement of a module with ``pass``."""
    lines = path.read_text().splitlines(keepends=True)
    spans = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse("".join(lines)))
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == "__slots__"
    ]
    for first, last in sorted(spans, reverse=True):
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        lines[first - 1 : last] = [f"{indent}pass\n"]
    path.write_text("".join(lines))


def compiled_copy(where: Path, modules: list[str]) -> Path:
    """The committed tree under ``where``, with ``modules`` compiled in place."""
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    scheduler = where / "cadenza/scheduling/scheduler.py"
    text = scheduler.read_text()
    if NATIVE_TUPLE_NEXT not in text:
        raise SystemExit(f"{scheduler}: Quantum.__next__ changed; update this script's work-around")
    scheduler.write_text(text.replace(NATIVE_TUPLE_NEXT, "def __next__(self) -> object:"))
    operators = where / "cadenza/worker/engine/operators"
    for module in modules:
        if (where / module).parent == operators or module.endswith("worker/decode.py"):
            _without_slots(where / module)
    _without_slots(operators / "base.py")
    (where / "pyproject.toml").rename(where / "pyproject.toml.off")  # setuptools would validate it
    (where / "_compile.py").write_text(_SETUP)
    subprocess.run(
        [sys.executable, "_compile.py", " ".join(modules), "build_ext", "--inplace"],
        cwd=where,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return where


def pair(cwd: Path, pythonpath: Path | None, out: Path, rounds: int, policy: str) -> dict[str, Any]:
    """One ``pair_hot_path.py`` run; its JSON."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    probe = "import cadenza.scheduling.scheduler as s; print(s.__file__)"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "pair_hot_path.py", "--out", str(out), "--rounds", str(rounds), "--policy", policy],
        cwd=cwd,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (result,) = out.glob("pair_hot_path-*.json")
    data: dict[str, Any] = json.loads(result.read_text())
    data["scheduler_loaded_from"] = loaded
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3, help="pair_hot_path.py runs per tree")
    parser.add_argument("--rounds", type=int, default=8, help="pairs per pair_hot_path.py run")
    parser.add_argument("--policy", default="cameo")
    parser.add_argument("--modules", nargs="+", default=list(DEFAULT_MODULES))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"compiled": [], "source": []}
    with tempfile.TemporaryDirectory(prefix="cadenza-compiled-") as tmp:
        copy = compiled_copy(Path(tmp) / "tree", args.modules)
        for repeat in range(args.repeats):
            for name in ("compiled", "source") if repeat % 2 == 0 else ("source", "compiled"):
                out = Path(tmp) / f"{name}-{repeat}"
                if name == "compiled":
                    data = pair(copy / "benchmarks" / "probes", copy, out, args.rounds, args.policy)
                else:
                    data = pair(ROOT / "benchmarks" / "probes", None, out, args.rounds, args.policy)
                runs[name].append(data)
                print(
                    f"{name:8s} run {repeat + 1}: ratio {data['ratio_median']}, unscheduled "
                    f"{statistics.median(data['unscheduled_us']):.2f} us, {args.policy} "
                    f"{statistics.median(data['scheduled_us']):.2f} us ({data['scheduler_loaded_from']})"
                )
    summary = {
        name: {
            "ratio_medians": [r["ratio_median"] for r in values],
            "unscheduled_us_medians": [round(statistics.median(r["unscheduled_us"]), 2) for r in values],
            "scheduled_us_medians": [round(statistics.median(r["scheduled_us"]), 2) for r in values],
        }
        for name, values in runs.items()
    }
    result = {
        "benchmark": "hot_path_compiled_against_source",
        "policy": args.policy,
        "compiled_modules": args.modules,
        "summary": summary,
        "runs": runs,
        **environment(),
    }
    write_result(args.out, "compiled_hot_path.json", result)
    for name, values in summary.items():
        print(f"{name:8s} ratio medians {values['ratio_medians']}")


if __name__ == "__main__":
    main()
