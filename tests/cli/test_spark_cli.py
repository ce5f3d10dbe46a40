"""``cadenza stats`` and ``cadenza spark-stage``: the connector and Spark options, parsed and passed on.

No JVM starts here: ``start_spark`` and the query starters are replaced by recorders, so what is
checked is exactly what the commands hand to them. That ``start_spark`` turns the options into a
session's configuration and refuses a native connector it cannot load is checked on the shared
session in tests/infra/spark/test_cli_spark_options.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from typer.testing import CliRunner

from cadenza.cli import _spark_run
from cadenza.cli.app import app
from cadenza.errors import CadenzaError

STAGE_MODULE = "tests.spark_stages.stage_pipelines"


class RecordedError(CadenzaError):
    """Raised by the fake query starter once it has recorded its arguments: the command stops there."""


class FakeSession:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


def text(output: str) -> str:
    """The CLI's output with rich's box drawing and line wrapping taken out."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", output))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Record start_spark's and the query starters' arguments instead of starting Spark."""
    pytest.importorskip("pyspark", reason="the commands import the Spark jobs (pip install 'cadenza[spark]')")
    from cadenza.feedback import stats_job  # noqa: PLC0415 - after the skip check
    from cadenza.spark_stages import runner  # noqa: PLC0415

    recorded: dict[str, Any] = {}
    session = FakeSession()

    def start_spark(app_name: str, master: str, **kwargs: Any) -> FakeSession:
        recorded["start_spark"] = {"app_name": app_name, "master": master, **kwargs}
        return session

    def start_stats(spark: Any, settings: Any, config: Any) -> None:
        recorded["stats_config"] = config
        raise RecordedError("recorded")

    def start_stage(spark: Any, graph: Any, stage_id: str, settings: Any, **kwargs: Any) -> None:
        recorded.setdefault("stages", []).append((graph.name, stage_id, kwargs))
        raise RecordedError("recorded")

    monkeypatch.setattr("cadenza.cli.stats.start_spark", start_spark)
    monkeypatch.setattr("cadenza.cli.spark_stage.start_spark", start_spark)
    monkeypatch.setattr(stats_job, "start_stats", start_stats)
    monkeypatch.setattr(runner, "start_stage", start_stage)
    monkeypatch.delenv(_spark_run.KAFKA_FORMAT_ENV, raising=False)
    recorded["session"] = session
    return recorded


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, text(result.output)


def test_stats_passes_the_connector_spark_conf_and_records_per_trigger(calls: dict[str, Any]) -> None:
    code, out = run(
        "stats",
        "--kafka-format",
        "cadenza-kafka",
        "--spark-conf",
        "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1",
        "--spark-conf",
        "spark.driver.extraJavaOptions=-Da=b -Dc=d",
        "--max-records-per-trigger",
        "5000",
    )
    assert code == 1 and "recorded" in out  # stopped by the fake start_stats, after start_spark
    assert calls["start_spark"] == {
        "app_name": "cadenza-stats",
        "master": "local[2]",
        "kafka_format": _spark_run.KafkaFormat.CADENZA_KAFKA,
        "spark_conf": {
            "spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1",
            "spark.driver.extraJavaOptions": "-Da=b -Dc=d",  # split at the first '=' only
        },
    }
    assert calls["stats_config"].max_records_per_trigger == 5000
    assert calls["session"].stopped


def test_stats_defaults_to_auto_with_no_extra_conf_and_no_record_limit(calls: dict[str, Any]) -> None:
    code, _ = run("stats")
    assert code == 1
    assert calls["start_spark"]["kafka_format"] is _spark_run.KafkaFormat.AUTO
    assert calls["start_spark"]["spark_conf"] == {}
    assert calls["stats_config"].max_records_per_trigger is None


def test_the_connector_can_come_from_the_environment(calls: dict[str, Any]) -> None:
    chosen = []
    for args in ([], ["--kafka-format", "auto"]):
        code, _ = run("stats", *args, env={_spark_run.KAFKA_FORMAT_ENV: "kafka"})
        assert code == 1
        chosen.append(calls["start_spark"]["kafka_format"])
    assert chosen == [_spark_run.KafkaFormat.KAFKA, _spark_run.KafkaFormat.AUTO]  # the option wins


def test_spark_stage_passes_the_connector_and_spark_conf(calls: dict[str, Any]) -> None:
    code, out = run(
        "spark-stage",
        STAGE_MODULE,
        "--kafka-format",
        "kafka",
        "--spark-conf",
        "spark.executor.memory=1g",
    )
    assert code == 1 and "recorded" in out
    assert calls["start_spark"] == {
        "app_name": "cadenza-spark-stage",
        "master": "local[2]",
        "kafka_format": _spark_run.KafkaFormat.KAFKA,
        "spark_conf": {"spark.executor.memory": "1g"},
    }
    assert [(name, stage) for name, stage, _ in calls["stages"]] == [("sales", "3-spark_stage")]
    assert calls["session"].stopped


@pytest.mark.parametrize("command", [["stats"], ["spark-stage", STAGE_MODULE]])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spark-conf", "spark.driver.memory"], "'spark.driver.memory' is not KEY=VALUE"),
        (["--spark-conf", "=2g"], "'=2g' is not KEY=VALUE"),
        (["--spark-conf", "driver.memory=2g"], "'driver.memory' is not a Spark configuration key"),
        (
            ["--spark-conf", "spark.cadenza.kafka.format=kafka"],
            "set spark.cadenza.kafka.format with --kafka-format",
        ),
        (["--kafka-format", "kafak"], "'kafak' is not one of"),
    ],
)
def test_a_malformed_option_is_a_usage_error_before_spark_starts(
    calls: dict[str, Any], command: list[str], args: list[str], message: str
) -> None:
    code, out = run(*command, *args)
    assert code == 2, out
    assert message in out
    assert "start_spark" not in calls


def test_a_malformed_connector_in_the_environment_is_a_usage_error(calls: dict[str, Any]) -> None:
    code, out = run("stats", env={_spark_run.KAFKA_FORMAT_ENV: "native"})
    assert code == 2 and "'native' is not one of" in out
    assert "start_spark" not in calls


def test_records_per_trigger_must_be_positive(calls: dict[str, Any]) -> None:
    code, out = run("stats", "--max-records-per-trigger", "0")
    assert code == 2 and "--max-records-per-trigger" in out
    assert "start_spark" not in calls


def test_parse_spark_conf_without_a_cli() -> None:
    assert _spark_run.parse_spark_conf(None) == {}
    assert _spark_run.parse_spark_conf(["spark.a=1", "spark.b = x=y", "spark.a=2"]) == {
        "spark.a": "2",  # the last one wins, as with spark-submit --conf
        "spark.b": " x=y",
    }
