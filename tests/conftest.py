"""The suite's broker comes from cadenza's own pytest plugin, the one users get too.

How the suite stays fast (docs/development/testing.md): ``make test`` runs it in two passes. The first runs in
parallel (pytest-xdist, one embedded broker per xdist worker); the second runs the ``timing`` tests
alone, since they assert on latencies, CPU or memory measured on this host and a busy neighbour
would skew what they measure. The Spark tests go to one xdist worker, so a run starts one JVM, not
one per worker. A test that takes over ``SLOW_SECONDS`` must say why with
``@pytest.mark.slow("...")``; the summary names any that do not, and the slow tests start first.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytest_plugins = ["cadenza.testing.pytest_plugin"]

#: A test running longer than this without a ``slow`` marker is named in the summary.
SLOW_SECONDS = 20.0

#: The tests that start a JVM share one worker, and so one SparkSession (the ``spark`` fixture below):
#: the Spark adapter's, and those of the Spark jobs beside the features they serve.
SPARK_TESTS = (
    "tests/infra/spark/",
    "tests/feedback/test_stats_job.py",
    "tests/analysis/test_spark_job.py",
    "tests/spark_stages/",
)

if importlib.util.find_spec("pyspark") is None:
    # Without the `spark` extra the Spark jobs' tests cannot import what they test.
    collect_ignore_glob = [
        "feedback/test_stats_job.py",
        "feedback/span_data.py",
        "analysis/test_spark_job.py",
        "spark_stages/*",
    ]

_unmarked_slow: list[tuple[float, str]] = []


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Every test under ``SPARK_TESTS`` goes to one xdist worker, the others one by one as
    workers free up. (Not ``--dist loadgroup``: with pytest 9.2 xdist's group marks no longer take
    effect, pytest-dev/pytest-xdist#1386.)"""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only when xdist runs

    class SparkTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "spark" if nodeid.startswith(SPARK_TESTS) else nodeid

    return SparkTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``slow`` tests first, in collection order otherwise: started last, a 60 s test would hold
    the run open while the other workers have finished. Every xdist worker sorts alike, as it must."""
    for item in items:
        slow = item.get_closest_marker("slow")
        if slow is not None and not (slow.args and isinstance(slow.args[0], str) and slow.args[0]):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.slow needs the reason as its argument")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration > SLOW_SECONDS and "slow" not in report.keywords:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unmarked_slow:
        terminalreporter.section(f"tests over {SLOW_SECONDS:.0f} s without a slow marker", yellow=True)
        for duration, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.line(f"{duration:6.1f} s  {nodeid}")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for every Spark test: a JVM start costs seconds, so it is paid once."""
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install 'cadenza[spark]')")
    from cadenza.infra.spark import register, spark_session  # noqa: PLC0415 - after the skip check

    # Spark's Python workers must import cadenza: run them on this interpreter (the venv's).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = spark_session(
        "cadenza-tests",
        master="local[2]",
        shuffle_partitions=2,
        ui=False,
        config={"spark.sql.session.timeZone": "UTC"},
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
