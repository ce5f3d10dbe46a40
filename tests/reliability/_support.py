"""Helpers shared by the reliability tests: producing with headers, latencies, worker processes.

Worker processes are ``cadenza worker`` subprocesses (the CLI users run), so a SIGKILL, an RSS
reading or a log line is the real thing. Threads (:func:`tests.worker.kafka_io.running`) are used
where the test needs the worker's counters or exporter in hand.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from confluent_kafka import KafkaError, Message

from cadenza.infra.broker.embedded import free_port
from cadenza.infra.kafka.clients import DeliveryReport, flush_or_raise, make_producer
from cadenza.settings import KafkaSettings
from tests.worker.kafka_io import Reader, Record

ROOT = Path(__file__).resolve().parents[2]

#: (key, value, partition, headers) of a record to produce.
Headed = tuple[bytes | None, bytes | None, int, list[tuple[str, str | bytes | None]]]


def group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def quick(settings: KafkaSettings) -> KafkaSettings:
    """The test broker's settings with a short session timeout: the embedded broker's group join takes
    about half of it, and every test here joins at least once."""
    return settings.model_copy(update={"session_timeout_ms": 3000})


def produce_with_headers(
    settings: KafkaSettings, topic: str, records: Sequence[Headed], **overrides: object
) -> list[int]:
    """Produce in order, with headers; return each record's offset."""
    producer, errors = make_producer(settings, **overrides)
    offsets = [-1] * len(records)
    report = DeliveryReport()

    def delivered(index: int) -> Callable[[KafkaError | None, Message], None]:
        def callback(error: KafkaError | None, message: Message) -> None:
            report(error, message)
            offset = message.offset()
            if error is None and offset is not None:
                offsets[index] = offset

        return callback

    for index, (key, value, partition, headers) in enumerate(records):
        producer.produce(topic, value, key, partition, headers=headers, on_delivery=delivered(index))
        producer.poll(0)
    flush_or_raise(producer, report, timeout=30)
    errors.raise_fatal()
    return offsets


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1): a value that was observed, never interpolated."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def latencies(records: Sequence[Record], field: str = "sent") -> list[float]:
    """Seconds from the ``field`` timestamp inside each result's JSON value to the result's CreateTime
    (stamped by the worker's producer when it produced the result)."""
    return [r.timestamp - float(json.loads(r.value or b"{}")[field]) for r in records]


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class WorkerProcess:
    """A ``cadenza worker`` subprocess; its output goes to ``log`` (appended, so restarts share one log)."""

    def __init__(
        self,
        module: Path,
        settings: KafkaSettings,
        group: str,
        log: Path,
        *args: str,
        env: dict[str, str] | None = None,
        metrics: bool = False,
    ) -> None:
        self.log = log
        self.metrics_port = free_port() if metrics else None
        command = [sys.executable, "-m", "cadenza", "worker", str(module), "--group", group, *args]
        if self.metrics_port is not None:
            command += ["--metrics-port", str(self.metrics_port)]
        environment = {
            **os.environ,
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
            **(env or {}),
        }
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=module.parent, env=environment, stdout=out, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> None:
        code = self.process.poll()
        assert code is None, f"the worker exited with {code}:\n{self.text()[-3000:]}"

    def wait_running(self, timeout: float = 30.0) -> None:
        """Until the worker printed that it runs (topics created, group subscribed)."""
        deadline = time.monotonic() + timeout
        while "running;" not in self.text():
            self.alive()
            assert time.monotonic() < deadline, f"the worker did not start:\n{self.text()[-3000:]}"
            time.sleep(0.05)

    def scrape(self) -> str:
        assert self.metrics_port is not None, "started without metrics"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as page:
            body: bytes = page.read()
        return body.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process.poll() is not None:
            return self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the worker ignored SIGTERM for {timeout:.0f}s") from None


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a thread; ``peak`` is the most seen."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
                self.samples += 1
            except (OSError, RuntimeError):
                return  # the process is gone
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def wait_reading(
    reader: Reader,
    done: Callable[[], bool],
    timeout: float,
    what: str | Callable[[], str],
    *workers: WorkerProcess,
) -> None:
    """Poll ``reader`` until ``done()``; fail early if a worker process died."""
    deadline = time.monotonic() + timeout
    while not done():
        for worker in workers:
            worker.alive()
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            tails = "\n".join(w.text()[-2000:] for w in workers)
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {detail}\n{tails}")
        reader.poll(0.1)


class LocalS3:
    """An S3 endpoint on this machine (a ``moto`` server subprocess) with one empty bucket.

    It gives the embedded broker storage that outlives the broker process (``s3://BUCKET/``), so a
    broker restart behaves as a Kafka cluster's does: topics, records and committed offsets are still
    there. moto keeps the bucket in its own memory, so it must outlive every broker that uses it.
    """

    def __init__(self, log: Path, bucket: str = "tansu") -> None:
        self.bucket = bucket
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(f"{self.url}/{bucket}", method="PUT")
                with urllib.request.urlopen(request, timeout=2):
                    break
            except OSError:
                assert self.process.poll() is None, f"the S3 server exited:\n{log.read_text()[-2000:]}"
                assert time.monotonic() < deadline, "the S3 server did not answer within 30 s"
                time.sleep(0.1)

    @property
    def storage(self) -> str:
        return f"s3://{self.bucket}/"

    @property
    def environment(self) -> dict[str, str]:
        """What the broker needs to reach it (Tansu reads the AWS SDK's usual variables)."""
        return {
            "AWS_ENDPOINT": self.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def log_holes(self, topics: Sequence[str]) -> list[str]:
        """Offsets below a partition's high watermark that no stored record batch holds.

        Tansu on S3 writes a partition's watermark before the record batch it counts; a broker stopped
        between the two leaves a hole, which no Kafka broker does: a consumer whose position lands on
        it (at the end of a log that gets no record after it) waits there forever. A run that hit one
        measured the broker, not cadenza.
        """
        import boto3  # noqa: PLC0415 - moto's dependency, needed only here

        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )
        holes: list[str] = []
        for topic in topics:
            prefix = f"clusters/tansu_cluster/topics/{topic}/partitions/"
            keys: list[str] = []
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for page in pages:
                keys += [item["Key"] for item in page.get("Contents", [])]
            for partition in sorted({key[len(prefix) :].split("/")[0] for key in keys}):
                where = f"{prefix}{partition}/"
                watermark = client.get_object(Bucket=self.bucket, Key=f"{where}watermark.json")
                high = json.loads(watermark["Body"].read())["high"] or 0
                bases = sorted(
                    int(key[len(where) + len("records/") : -len(".batch")])
                    for key in keys
                    if key.startswith(f"{where}records/") and key.endswith(".batch")
                )
                covered = 0
                for index, base in enumerate(bases):
                    if base > covered:
                        holes.append(f"{topic}[{int(partition)}] offsets {covered}-{base - 1}")
                    following = bases[index + 1] if index + 1 < len(bases) else high
                    if following == base + 1:
                        covered = following  # a batch of one record: no need to read it
                        continue
                    key = f"{where}records/{base:020d}.batch"
                    batch = client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
                    covered = base + int.from_bytes(batch[23:27], "big") + 1  # lastOffsetDelta
                if high > covered:
                    holes.append(f"{topic}[{int(partition)}] offsets {covered}-{high - 1} (its end)")
        return holes

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
