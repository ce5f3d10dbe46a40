"""Declaring pipelines stays light: ``import cadenza`` and a declared pipeline load no Kafka client,
Prometheus or Spark module (the public names are lazy). Each check runs in a fresh interpreter,
since this test process has long imported everything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import cadenza
import cadenza.pipelines
import cadenza.worker

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("confluent_kafka", "prometheus_client", "pyspark")

DECLARE = """
import cadenza
from cadenza import Pipeline, Tumbling
from pydantic import BaseModel

class Click(BaseModel):
    user: str
    ts: float

clicks = Pipeline("clicks-per-user", tenant="ads", latency_target="250ms")
(
    clicks.source("clicks", value=Click, timestamp="ts")
    .filter(lambda c: c.user != "bot")
    .key_by(lambda c: c.user)
    .window(Tumbling("1s"))
    .count()
    .sink("clicks-per-user")
)
graph = clicks.compile()
assert graph.name == "clicks-per-user"
"""


def _loaded_after(code: str) -> set[str]:
    report = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", code + report],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {name.split(".")[0] for name in json.loads(result.stdout.strip().splitlines()[-1])}


def test_declaring_and_compiling_a_pipeline_loads_no_kafka_prometheus_or_spark() -> None:
    loaded = _loaded_after(DECLARE)
    assert "cadenza" in loaded
    assert sorted(set(HEAVY) & loaded) == []


def test_the_worker_still_loads_its_kafka_client_and_metrics_on_first_use() -> None:
    # The same probe sees the heavy modules once a worker is asked for: the check above can fail.
    loaded = _loaded_after("import cadenza\ncadenza.Worker\n")
    assert {"confluent_kafka", "prometheus_client"} <= loaded


def test_every_public_name_of_the_lazy_packages_resolves_and_is_listed() -> None:
    for package in (cadenza, cadenza.pipelines, cadenza.worker):
        missing = [name for name in package.__all__ if getattr(package, name, None) is None]
        assert missing == [], package.__name__
        assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("package", [cadenza, cadenza.worker], ids=lambda p: p.__name__)
def test_an_unknown_name_is_an_attribute_error_naming_it(package: ModuleType) -> None:
    name = "NoSuchThing"
    with pytest.raises(AttributeError, match=name):
        getattr(package, name)
