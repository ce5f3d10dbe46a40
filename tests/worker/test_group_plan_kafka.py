"""Issue 15, "one group, one plan": a worker whose pipelines differ from its (explicit) group's is refused
before it commits anything; a deliberate upgrade (the old workers stopped, or ``--replace-plan``)
replaces the group's plan."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cadenza import Pipeline
from cadenza.pipelines import Tumbling
from cadenza.settings import KafkaSettings
from cadenza.testing.pytest_plugin import NewTopic
from cadenza.worker import Worker
from cadenza.worker.config import WorkerConfig
from cadenza.worker.kafka.group_plan import GroupPlan, PlanMismatchError, decide_plan, plan_fingerprint
from tests.reliability._support import group, quick
from tests.worker.kafka_io import committed, produce, reading, running

RECORDS = 40


def _map(name: str, source: str, sink: str, *, scale: int = 1) -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source(source).map(lambda v: {"n": v["n"] * scale}).sink(sink)
    return pipeline


def _windowed(name: str, size: str) -> Pipeline:
    pipeline = Pipeline(name, tenant="t", latency_target="1s")
    pipeline.source("in").key_by(lambda v: v["k"]).window(Tumbling(size)).count().sink("out")
    return pipeline


def test_the_fingerprint_follows_what_the_pipelines_do_not_their_code_or_order() -> None:
    a, b = _map("a", "in", "out"), _map("b", "in", "out-b")
    # Other function objects (another process would have other ones too) give the same plan.
    assert plan_fingerprint([a.compile()]) == plan_fingerprint([_map("a", "in", "out", scale=3).compile()])
    assert plan_fingerprint([a.compile(), b.compile()]) == plan_fingerprint([b.compile(), a.compile()])
    different = {
        plan_fingerprint([a.compile()]),
        plan_fingerprint([_map("a", "in", "elsewhere").compile()]),
        plan_fingerprint([_map("a2", "in", "out").compile()]),
        plan_fingerprint([a.compile(), b.compile()]),
        plan_fingerprint([_windowed("w", "1s").compile()]),
        plan_fingerprint([_windowed("w", "2s").compile()]),
    }
    assert len(different) == 6


def test_the_decision_table() -> None:
    mine, other = GroupPlan("f1", ("a",)), GroupPlan("f2", ("b",))
    for live in (False, True):
        for replace in (False, True):
            assert decide_plan(None, mine, live=live, replace=replace) == "write"
            assert decide_plan(mine, mine, live=live, replace=replace) == "join"
            expected = "refuse" if live and not replace else "replace"
            assert decide_plan(other, mine, live=live, replace=replace) == expected
    assert GroupPlan.decode(mine.encode()) == mine
    assert GroupPlan.decode(b"not json") is None
    assert GroupPlan.decode(b'{"fingerprint": 1, "pipelines": []}') is None


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_a_worker_of_another_plan_is_refused_before_committing_and_the_same_plan_joins(
    kafka_settings: KafkaSettings, new_topic: NewTopic
) -> None:
    settings = quick(kafka_settings)
    source, out, other_out = new_topic(partitions=2), new_topic(partitions=1), new_topic(partitions=1)
    name, suffix = group(), uuid.uuid4().hex[:6]
    first = Worker([_map(f"a-{suffix}", source, out)], settings, WorkerConfig(group=name, partitions=2))
    with running(first), reading(settings, [out]) as reader:
        produce(settings, source, [(None, json.dumps({"n": n}).encode(), n % 2) for n in range(RECORDS)])
        reader.wait_for(lambda got: len(got[out]) >= RECORDS, timeout=45, what="the first results")
        deadline = time.monotonic() + 30
        while sum(max(0, offset) for offset in committed(settings, name, source, 2)) < RECORDS:
            assert time.monotonic() < deadline, "the first results were not committed"
            time.sleep(0.2)
        # Another plan in the live group: refused, naming the group, both plans and the fix.
        intruder = Worker(
            [_map(f"b-{suffix}", source, other_out)], settings, WorkerConfig(group=name, partitions=2)
        )
        produce(settings, source, [(None, json.dumps({"n": n}).encode(), n % 2) for n in range(RECORDS)])
        with pytest.raises(PlanMismatchError) as refused:
            intruder.start()
        message = str(refused.value)
        for part in (name, f"a-{suffix}", f"b-{suffix}", "--group", "--replace-plan"):
            assert part in message, message
        assert intruder.joined is False and intruder.assignment == set()
        # The same plan (another process would compile it again) joins and shares the work.
        second = Worker([_map(f"a-{suffix}", source, out)], settings, WorkerConfig(group=name, partitions=2))
        with running(second):
            reader.wait_for(lambda got: len(got[out]) >= 2 * RECORDS, timeout=45, what="the second batch")
    # The refused worker committed nothing: the offsets are those of the group's own workers.
    assert committed(settings, name, source, 2) == [RECORDS, RECORDS]
    with reading(settings, [other_out]) as other:
        other.settle(1.0)
    assert other.records[other_out] == []


@pytest.mark.kafka
@pytest.mark.timeout(150)
def test_an_upgrade_replaces_the_plan_once_the_old_workers_stopped_or_with_replace_plan(
    kafka_settings: KafkaSettings, new_topic: NewTopic, caplog: pytest.LogCaptureFixture
) -> None:
    settings = quick(kafka_settings)
    source, out = new_topic(partitions=1), new_topic(partitions=1)
    name, suffix = group(), uuid.uuid4().hex[:6]
    v1 = Worker([_map(f"v1-{suffix}", source, out)], settings, WorkerConfig(group=name, partitions=1))
    with running(v1), reading(settings, [out]) as reader:
        produce(settings, source, [(None, json.dumps({"n": n}).encode(), 0) for n in range(RECORDS)])
        reader.wait_for(lambda got: len(got[out]) >= RECORDS, timeout=45, what="v1's results")
    # v1 stopped cleanly: the group has no live member, so v2 (a changed pipeline) takes it over.
    caplog.set_level(logging.WARNING, logger="cadenza.worker")
    v2 = Worker(
        [_map(f"v2-{suffix}", source, out, scale=10)], settings, WorkerConfig(group=name, partitions=1)
    )
    with running(v2), reading(settings, [out]) as reader:
        produce(settings, source, [(None, json.dumps({"n": n}).encode(), 0) for n in range(RECORDS)])
        reader.wait_for(lambda got: len(got[out]) >= 2 * RECORDS, timeout=45, what="v2's results")
        # v1 restarted now is the other plan in a live group: refused.
        with pytest.raises(PlanMismatchError):
            Worker(
                [_map(f"v1-{suffix}", source, out)], settings, WorkerConfig(group=name, partitions=1)
            ).start()
        # While v2 still runs, v3 with --replace-plan takes the record over at once.
        v3 = Worker(
            [_map(f"v3-{suffix}", source, out)],
            settings,
            WorkerConfig(group=name, partitions=1, replace_plan=True),
        )
        v3.start()
        v3.close()
        # v3 is now the group's plan: v2 restarted while the group is live is refused.
        with pytest.raises(PlanMismatchError):
            Worker(
                [_map(f"v2-{suffix}", source, out, scale=10)],
                settings,
                WorkerConfig(group=name, partitions=1),
            ).start()
    values = sorted(json.loads(r.value or b"")["n"] for r in reader.records[out])
    assert values == sorted([*range(RECORDS), *(10 * n for n in range(RECORDS))])  # v1 then v2, once each
    replaced = [r.getMessage() for r in caplog.records if "replacing its plan" in r.getMessage()]
    assert len(replaced) == 2, replaced
    assert "no live member" in replaced[0] and "--replace-plan" in replaced[1]


MODULE = """
from cadenza import Pipeline

p = Pipeline({name!r}, tenant="t", latency_target="1s")
p.source({source!r}).map(lambda v: v).sink({sink!r})
"""


@pytest.mark.kafka
@pytest.mark.timeout(120)
def test_cadenza_worker_of_another_plan_exits_2_with_one_line(
    kafka_settings: KafkaSettings, new_topic: NewTopic, tmp_path: Path
) -> None:
    settings = quick(kafka_settings)
    source, out = new_topic(partitions=1), new_topic(partitions=1)
    name, suffix = group(), uuid.uuid4().hex[:6]
    module = tmp_path / f"other_{suffix}.py"
    module.write_text(MODULE.format(name=f"other-{suffix}", source=source, sink=out))
    with running(
        Worker([_map(f"live-{suffix}", source, out)], settings, WorkerConfig(group=name, partitions=1))
    ):
        environment = {key: value for key, value in os.environ.items() if not key.startswith("CADENZA_")}
        environment |= {
            "CADENZA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "CADENZA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
        }
        result = subprocess.run(
            [sys.executable, "-m", "cadenza", "worker", str(module), "--group", name],
            capture_output=True,
            text=True,
            timeout=60,
            env=environment,
            cwd=tmp_path,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    text = " ".join(output.split())
    for part in (name, f"live-{suffix}", f"other-{suffix}", "--replace-plan"):
        assert part in text, output
