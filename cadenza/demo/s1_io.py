"""What S1 sends and reads: the seeded input plan of a phase, the producers that send it on schedule
(or live, for the calibration), the run's topics and the reader of its output topics.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from cadenza.demo.s1_config import S1Config
from cadenza.infra.kafka.clients import make_consumer, make_producer
from cadenza.infra.kafka.topics import TopicSpec
from cadenza.loadgen import Bursts
from cadenza.settings import KafkaSettings


@dataclass(frozen=True)
class Send:
    at: float  # seconds after the phase starts
    tenant: str  # "LS" or "BA"
    key: str
    value: dict[str, Any]  # without "ts": stamped at send time


def plan(
    config: S1Config, ba_rate: float, duration: float, *, bursts: bool, seed: int, first_id: int = 0
) -> list[Send]:
    """The records of one phase in send order: LS steady, BA in Pareto bursts (or steady).

    BA job ids start at ``first_id``: the warm-up and the measured phase of one run must not share
    ids, or the measurement matches a measured job with the warm-up's output of the same id (an
    earlier version did: about a fifth of BA's latencies came out negative, under every system).
    """
    rng = random.Random(f"s1:{seed}:values")
    sends: list[Send] = []
    for i in range(int(duration * config.ls_rate)):
        user = f"u{rng.randrange(config.users)}"
        page = "/health" if rng.random() < config.health_share else f"/p{rng.randrange(8)}"
        sends.append(Send(i / config.ls_rate, "LS", user, {"user": user, "page": page}))
    times_rng = random.Random(f"s1:{seed}:bursts")
    ba_times: list[float] = []
    if bursts:
        shape = Bursts(
            alpha=config.burst_alpha,
            mean_seconds=config.burst_mean_s,
            peak=config.burst_peak,
            max_seconds=config.burst_max_s,
        )
        start = 0
        for size in shape.sizes(times_rng, ba_rate):
            for offset in range(size):
                ba_times.append(start / ba_rate + offset / (config.burst_peak * ba_rate))
            start += size
            if start / ba_rate >= duration:
                break
    else:
        ba_times = [i / ba_rate for i in range(int(duration * ba_rate))]
    for index, at in enumerate(t for t in ba_times if t < duration):
        job = first_id + index
        sends.append(Send(at, "BA", f"j{job}", {"id": job, "payload": f"job-{seed}-{job}"}))
    sends.sort(key=lambda send: send.at)
    return sends


@dataclass
class Topics:
    ls_in: str
    ls_out: str
    ba_in: str
    ba_out: str

    @classmethod
    def fresh(cls, run: str) -> Topics:
        return cls(f"s1-{run}-ls-in", f"s1-{run}-ls-out", f"s1-{run}-ba-in", f"s1-{run}-ba-out")

    def specs(self, partitions: int) -> list[TopicSpec]:
        return [TopicSpec(name, partitions) for name in asdict(self).values()]

    def inputs(self) -> dict[str, str]:
        """Each tenant's input topic: a scenario with more tenants (S6) subclasses with more topics."""
        return {"LS": self.ls_in, "BA": self.ba_in}

    def outputs(self) -> dict[str, str]:
        """Each tenant's output topic, which :class:`OutputReader` reads."""
        return {"LS": self.ls_out, "BA": self.ba_out}


@dataclass
class Output:
    value: dict[str, Any]
    timestamp: float


class Outputs(Protocol):
    """What :func:`measure` reads: the outputs of each tenant, in arrival order."""

    ls: list[Output]
    ba: list[Output]


class OutputReader:
    """Reads every tenant's output topic from the beginning in a thread, as the system writes them.

    ``by_tenant`` holds each tenant's outputs in arrival order; ``ls`` and ``ba`` are two of its lists.
    """

    def __init__(self, settings: KafkaSettings, topics: Topics, partitions: int) -> None:
        self.topics = topics
        outputs = topics.outputs()
        self.by_tenant: dict[str, list[Output]] = {tenant: [] for tenant in outputs}
        self._tenant_of = {topic: tenant for tenant, topic in outputs.items()}
        self.ls: list[Output] = self.by_tenant["LS"]
        self.ba: list[Output] = self.by_tenant["BA"]
        self._stop = threading.Event()
        self._consumer, self._errors = make_consumer(settings, f"s1-reader-{uuid.uuid4().hex[:8]}")
        self._consumer.assign(
            [
                TopicPartition(topic, partition, OFFSET_BEGINNING)
                for topic in outputs.values()
                for partition in range(partitions)
            ]
        )
        self._thread = threading.Thread(target=self._run, name="s1-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.1):
                if message.error() is not None:
                    continue
                try:
                    value = json.loads(message.value() or b"null")
                except ValueError:
                    continue
                tenant = self._tenant_of.get(message.topic() or "")
                if tenant is not None:
                    self.by_tenant[tenant].append(Output(value, message.timestamp()[1] / 1000.0))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def send_phase(
    producers: Mapping[str, Any], topics: Topics, sends: Sequence[Send], started: float
) -> list[tuple[Send, float]]:
    """Produce ``sends`` on schedule, each tenant through its own producer (``producers[tenant]``);
    return each with the ``ts`` it was stamped with.

    One producer per tenant, as two tenants' applications would have: through one producer, LS's
    records would queue behind BA's bursts in its buffer and on its connection to the broker,
    first come first served before any system under test sees them.
    """
    stamped: list[tuple[Send, float]] = []
    inputs = topics.inputs()
    for send in sends:
        delay = started + send.at - time.time()
        if delay > 0.0005:
            time.sleep(delay)
        ts = time.time()
        topic = inputs[send.tenant]
        producer = producers[send.tenant]
        value = json.dumps({**send.value, "ts": ts}).encode()
        while True:
            try:
                producer.produce(topic, value, send.key.encode())
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        stamped.append((send, ts))
    for producer in producers.values():
        producer.flush(30)
    return stamped


def live_input(
    settings: KafkaSettings, topics: Topics, config: S1Config, ba_rate: float, stop: threading.Event
) -> None:
    """LS at its benchmark rate and BA at ``ba_rate``, sent live until ``stop`` (for calibration)."""
    producer, _ = make_producer(settings, **{"enable.idempotence": False, "linger.ms": 5})
    rng = random.Random(5)
    started = time.monotonic()
    sent_ls = sent_ba = 0
    while not stop.is_set():
        elapsed = time.monotonic() - started
        for _ in range(int(elapsed * config.ls_rate) - sent_ls):
            user = f"u{rng.randrange(config.users)}"
            value = {"user": user, "page": "/p1", "ts": time.time()}
            producer.produce(topics.ls_in, json.dumps(value).encode(), user.encode())
            sent_ls += 1
        for _ in range(int(elapsed * ba_rate) - sent_ba):
            value = {"id": sent_ba, "payload": f"cal-{sent_ba}", "ts": time.time()}
            producer.produce(topics.ba_in, json.dumps(value).encode(), str(sent_ba).encode())
            sent_ba += 1
        producer.poll(0)
        stop.wait(0.01)
    producer.flush(10)
