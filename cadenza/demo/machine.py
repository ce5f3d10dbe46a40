"""What a measured result carries so it can be compared: the machine, the commit, and the JSON file.

Results are only comparable with the machine and code they were measured on, so the demo's and the
benchmarks' JSON files carry both. Outside a git checkout (an installed wheel) the commit is
``"unknown"``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict[str, object]:
    """The machine and code a result was measured on."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "commit": _commit(),
    }


def process_cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU seconds process ``pid`` has used so far, all its threads (Linux
    ``/proc``); ``None`` without a pid, elsewhere, or once the process is gone."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float | None:
    """CPU seconds all cores have spent not idle since boot (Linux ``/proc/stat``; ``None`` elsewhere)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def machine_and_commit() -> dict[str, object]:
    """:func:`environment` as result files carry it: ``{"machine": {...}, "commit": ...}``."""
    env = environment()
    return {"machine": {k: v for k, v in env.items() if k != "commit"}, "commit": env["commit"]}


def write_result(out: Path, filename: str, result: dict[str, object]) -> Path:
    """Write ``result`` as indented JSON to ``out/filename`` (creating ``out``) and say where."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return path
