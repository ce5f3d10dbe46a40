"""The benchmark modules live in benchmarks/scenarios/ and benchmarks/probes/ (not an installed package);
make them importable here."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
for folder in (BENCHMARKS / "probes", BENCHMARKS / "scenarios"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
