"""Worker discovery through the real broker: an announced worker is found and scraped, its
tombstone removes it, and garbage on the topic is skipped and counted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cadenza.dashboard import Dashboard, DiscoveryReader, parse_exposition
from cadenza.infra.kafka.clients import make_producer
from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker.announcer import WorkerAnnouncer, advertised_url, discovery_topic_spec


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_an_announced_worker_is_scraped_and_its_tombstone_removes_it(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(partitions=1, configs=discovery_topic_spec("x").configs)
    exporter = PrometheusExporter()
    exporter.register_callback(names.LATENCY_TARGET, lambda: {("LS", "LS-p"): 0.05})
    server = exporter.start_http(0)
    url = advertised_url(server.host, server.port)
    announcer = WorkerAnnouncer(
        kafka_settings,
        worker_id="test-worker-1",
        url=url,
        group="g",
        pipelines=["LS-p"],
        topic=topic,
        interval_s=0.5,
        create_topic=False,
    ).start()
    garbage, _ = make_producer(kafka_settings)
    garbage.produce(topic, key=b"junk", value=b"\x00 not an announcement")
    garbage.produce(topic, key=None, value=b"{}")
    garbage.flush(10)
    reader = DiscoveryReader(kafka_settings, topic, heartbeat_stale_s=10.0)
    board = Dashboard([], discovery=reader.workers, stale_after_s=10.0)
    try:
        assert wait_for(lambda: url in reader.workers(time.time())), "the announcement never arrived"
        found = reader.workers(time.time())[url]
        assert found.announcement.worker_id == "test-worker-1"
        assert found.announcement.pipelines == ("LS-p",) and not found.stale
        board.poll()
        (worker,) = board.view()["workers"]
        assert worker["url"] == url and worker["status"] == "up", worker
        assert [p["target_ms"] for p in board.view()["pipelines"]] == [50.0]  # really scraped
        assert wait_for(lambda: announcer.announcements >= 2)  # it keeps announcing
        assert announcer.failures == 0
        assert wait_for(lambda: reader.skipped >= 2)
        assert reader.skipped == 2

        announcer.close()  # a clean stop
        assert wait_for(lambda: url not in reader.workers(time.time())), "the tombstone was not applied"
        board.poll()
        assert board.view()["workers"] == []
    finally:
        announcer.close()
        reader.close()
        board.close()
        server.close()


def test_an_unreachable_broker_is_counted_not_raised() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", request_timeout_ms=1000)
    announcer = WorkerAnnouncer(
        settings, worker_id="w", url="http://h:1", group="g", pipelines=[], interval_s=1.0, create_topic=False
    )
    assert announcer.announce_once() is False
    assert announcer.failures == 1 and announcer.announcements == 0
    announcer.close(timeout=2.0)  # the tombstone fails too, quietly
    assert announcer.failures == 2


def test_cadenza_worker_announces_itself_and_says_goodbye_on_sigterm(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    source, sink, topic = new_topic(), new_topic(), new_topic(configs=discovery_topic_spec("x").configs)
    (tmp_path / "flows.py").write_text(
        "from cadenza.pipelines import Pipeline\n"
        f"p = Pipeline('announced', tenant='t', latency_target='1s')\n"
        f"p.source({source!r}).map(lambda v: v).sink({sink!r})\n"
    )
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers}
    command = [sys.executable, "-m", "cadenza", "worker", "flows.py", "--metrics-port", "0"]
    command += ["--metrics-advertised-host", "localhost"]
    command += ["--discovery-topic", topic, "--activities-topic", "off", "--group", f"g-{topic}"]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    reader = DiscoveryReader(kafka_settings, topic)
    try:
        assert wait_for(lambda: len(reader.workers(time.time())) == 1, 60), "the worker never announced"
        ((url, found),) = reader.workers(time.time()).items()
        assert url.startswith("http://localhost:"), url  # the advertised host, not the bound one
        assert found.announcement.pipelines == ("announced",) and found.announcement.group == f"g-{topic}"
        # The announcement comes as soon as the endpoint is up, which is before the worker has
        # started (topics, the group's plan) and registered its pipelines' series.
        assert wait_for(
            lambda: bool(
                parse_exposition(
                    urllib.request.urlopen(url + "/metrics", timeout=5).read().decode(), 0.0
                ).pipelines
            )
        ), "the advertised endpoint never exported the worker's pipelines"
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert wait_for(lambda: reader.workers(time.time()) == {}), "no tombstone after a clean stop"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        reader.close()


def test_cadenza_dashboard_follows_the_discovery_topic(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    topic = new_topic(configs=discovery_topic_spec("x").configs)
    exporter = PrometheusExporter()
    exporter.register_callback(names.LATENCY_TARGET, lambda: {("BA", "BA-p"): 5.0})
    server = exporter.start_http(0)
    url = advertised_url(server.host, server.port)
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers, "COLUMNS": "200"}
    env["CADENZA_DASHBOARD_DISCOVERY_TOPIC"] = topic  # the env var, as a container sets it
    command = [sys.executable, "-m", "cadenza", "dashboard", "--port", "0", "--interval", "0.5"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    announcer = WorkerAnnouncer(
        kafka_settings, worker_id="w-cli", url=url, group="g", pipelines=["BA-p"], topic=topic, interval_s=1.0
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert match and topic in line, line

        def workers() -> dict[str, Any]:
            with urllib.request.urlopen(match.group(0) + "api/state", timeout=5) as response:
                return {w["url"]: w for w in json.load(response)["workers"]}

        assert workers() == {}  # nobody announced yet: an empty page, not an error
        announcer.start()
        assert wait_for(lambda: workers().get(url, {}).get("status") == "up", 60), workers()
        assert workers()[url]["worker_id"] == "w-cli"
        garbage, _ = make_producer(kafka_settings)
        garbage.produce(topic, key=b"w-x", value=b"not json")
        garbage.flush(10)

        def discovery() -> dict[str, Any]:
            with urllib.request.urlopen(match.group(0) + "api/state", timeout=5) as response:
                found: dict[str, Any] = json.load(response)["extras"]["discovery"]
                return found

        assert wait_for(lambda: discovery()["skipped"] == 1, 30), discovery()
        assert discovery() == {"topic": topic, "workers": 1, "skipped": 1}
        with urllib.request.urlopen(match.group(0), timeout=5) as response:
            page = response.read().decode()
        assert f"{url} (w-cli)" in page and "1 record(s) skipped" in page
        announcer.close()
        assert wait_for(lambda: workers() == {}, 30), workers()
    finally:
        announcer.close()
        server.close()
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
