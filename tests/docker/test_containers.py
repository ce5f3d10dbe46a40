"""The worker image for real: build it, run two workers against a testcontainers Kafka, stop one.

Needs a Docker daemon; without one the test is skipped with that reason (see conftest.py), and the
same scenario runs with local processes in test_worker_processes.py.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cadenza.loadgen import HEALTH_PAGE, LoadPlan, Planned, Stream
from cadenza.settings import KafkaSettings
from tests.docker.test_worker_processes import SINK, SOURCE, collect, spread
from tests.worker.kafka_io import reading

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.1"  # the image the test fixture's testcontainers Kafka uses
KAFKA_ALIAS = "kafka"
SIGTERM_BOUND = 15.0


@pytest.fixture(scope="module")
def worker_image(docker_daemon: None) -> Iterator[str]:
    from testcontainers.core.image import DockerImage  # noqa: PLC0415 - needs Docker

    tag = f"cadenza-worker-test:{uuid.uuid4().hex[:8]}"
    with DockerImage(path=ROOT, dockerfile_path="docker/Dockerfile", tag=tag, target="worker"):
        yield tag


@pytest.fixture(scope="module")
def kafka_on_network(docker_daemon: None) -> Iterator[tuple[Any, KafkaSettings]]:
    from testcontainers.core.network import Network  # noqa: PLC0415 - needs Docker
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415

    with Network() as network:
        kafka = KafkaContainer(KAFKA_IMAGE).with_network(network).with_network_aliases(KAFKA_ALIAS)
        with kafka:
            yield network, KafkaSettings.load(bootstrap_servers=kafka.get_bootstrap_server())


def start_worker(image: str, network: Any, group: str) -> Any:
    from testcontainers.core.container import DockerContainer  # noqa: PLC0415 - needs Docker

    # Inside the network the broker's BROKER listener (port 9092) advertises the container's address.
    container = (
        DockerContainer(image)
        .with_network(network)
        .with_env("CADENZA_BOOTSTRAP_SERVERS", f"{KAFKA_ALIAS}:9092")
        .with_env("CADENZA_SESSION_TIMEOUT_MS", "6000")
        .with_env("CADENZA_GROUP", group)
        .with_env("CADENZA_LOG_LEVEL", "INFO")
        .with_command(["worker", "examples/clicks_per_user.py", "--group", group])
    )
    return container.start()


def assigned(container: Any) -> bool:
    stdout, stderr = container.get_logs()
    return any(
        str(json.loads(line).get("message", "")).startswith("assigned ")
        for line in (stdout + stderr).decode(errors="replace").splitlines()
        if line.startswith("{")
    )


def wait(what: str, done: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_two_worker_containers_count_every_window_and_stop_on_sigterm(
    worker_image: str, kafka_on_network: tuple[Any, KafkaSettings]
) -> None:
    network, settings = kafka_on_network
    run = uuid.uuid4().hex[:8]
    prefix, group = f"u{run}-", f"cadenza-containers-{run}"
    first = start_worker(worker_image, network, group)
    second = None
    try:
        wait("the first worker's partitions", lambda: assigned(first), timeout=120)
        second = start_worker(worker_image, network, group)
        wait("the second worker's partitions", lambda: assigned(second), timeout=120)
        sent: list[Planned] = []
        stream = Stream("clicks", 200.0, SOURCE, keys=16, key_prefix=prefix, health_share=0.1)
        spread(settings, f"warm{run}-", time.time() - 5)
        collect(LoadPlan((stream,), seed=1, duration=3.0), settings, sent)

        wrapped = second.get_wrapped_container()
        started = time.monotonic()
        wrapped.stop(timeout=int(SIGTERM_BOUND))  # SIGTERM, then SIGKILL after the bound
        took = time.monotonic() - started
        exit_code = wrapped.wait(timeout=30)["StatusCode"]
        assert exit_code == 0 and took < SIGTERM_BOUND, (exit_code, took)

        collect(LoadPlan((stream,), seed=2, duration=2.0), settings, sent)
        spread(settings, f"flush{run}-", max(p.record.value["ts"] for p in sent) + 1000)
        want = Counter(
            (p.record.key, float(math.floor(p.record.value["ts"])))
            for p in sent
            if p.record.value["page"] != HEALTH_PAGE
        )
        got: dict[tuple[str, float], set[int]] = {}

        def results() -> dict[tuple[str, float], set[int]]:
            got.clear()
            for record in reader.records[SINK]:
                value = json.loads(record.value or b"")
                if str(value["key"]).startswith(prefix):
                    got.setdefault((value["key"], float(value["window_start"])), set()).add(value["value"])
            return got

        with reading(settings, [SINK]) as reader:
            reader.wait_for(lambda _: results().keys() >= want.keys(), timeout=60, what="every window")
            reader.settle(0.5)
            results()
        assert dict(got) == {k: {n} for k, n in want.items()}
    finally:
        for container in (first, second):
            if container is not None:
                container.stop()
