"""One registry of worker settings: WorkerConfig and ProcessConfig drive the CLI options,
Worker(pipelines, settings, config, process=...) and the docs' settings table, so the three cannot
disagree (no broker: nothing here connects)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from cadenza.cli.app import app
from cadenza.errors import ConfigError
from cadenza.pipelines import Pipeline
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker
from cadenza.worker.config import ENV_PREFIX, ProcessConfig, WorkerConfig, bounds, settings_table

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def _pipeline() -> Pipeline:
    pipeline = Pipeline("config-test", tenant="t", latency_target="1s")
    pipeline.source("config-test-in").map(lambda value: value).sink("config-test-out")
    return pipeline


def _worker_options() -> dict[str, TyperOption]:
    command = typer.main.get_command(app)
    assert isinstance(command, TyperGroup)
    worker = command.commands["worker"]
    return {p.name: p for p in worker.params if isinstance(p, TyperOption) and p.name is not None}


def test_the_docs_table_is_the_one_the_model_renders() -> None:
    """The settings page holds no table of its own: the docs build renders settings_table() in place
    of its marker (docs/hooks/reference.py; tests/docs/test_reference.py checks the built page)."""
    text = SETTINGS_PAGE.read_text(encoding="utf-8")
    assert "<!-- cadenza:settings cadenza.worker.config:WorkerConfig -->" in text
    assert "| `CADENZA_POLICY` |" not in text, "docs/reference/settings.md has a copied table: remove it"
    rows = len(WorkerConfig.model_fields) + len(ProcessConfig.model_fields)
    assert settings_table().count("\n") == rows + 1


def test_every_setting_is_a_cli_option_with_its_variable_default_and_bounds() -> None:
    options = _worker_options()
    fields = {**WorkerConfig.model_fields, **ProcessConfig.model_fields}
    for name, field in fields.items():
        option = options.get(name)
        assert option is not None, f"cadenza worker has no --{name.replace('_', '-')}"
        assert option.opts == [f"--{name.replace('_', '-')}"]
        assert option.envvar == f"{ENV_PREFIX}{name.upper()}"
        # A mapping is an option of JSON text: not given (None), the model's default applies.
        assert option.default == (None if isinstance(field.default, dict) else field.default)
        assert field.description is not None and option.help is not None
        assert option.help.startswith(field.description)
        limits = bounds(field)
        assert (option.min, option.max) == (limits.get("ge"), limits.get("le"))
    # Nothing else but the logging options and --check: every worker setting lives in a model.
    assert set(options) - set(fields) == {"log_level", "log_format", "check"}


def test_a_worker_without_a_config_reads_the_environment_as_the_cli_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CADENZA_BATCH_SIZE", "7")
    monkeypatch.setenv("CADENZA_MAX_RESTARTS", "2")
    worker = Worker([_pipeline()], KafkaSettings())
    assert worker.config == WorkerConfig.load() and worker.config.batch_size == 7
    assert worker.process == ProcessConfig.load() and worker.process.max_restarts == 2


def test_the_environment_sets_the_config_in_its_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_QUANTUM_MS", "5")
    monkeypatch.setenv("CADENZA_PROGRESS_INTERVAL_MS", "250")
    monkeypatch.setenv("CADENZA_WATERMARK_IDLE_TIMEOUT", "0")
    monkeypatch.setenv("CADENZA_ACTIVITIES_TOPIC", "off")
    monkeypatch.setenv("CADENZA_BATCH_SIZE", "7")
    monkeypatch.setenv("CADENZA_FETCH_WAIT_MS", "250")
    config = WorkerConfig.load(batch_size=9)  # an explicit value beats the variable
    assert config.fetch_wait_ms == 250
    assert config.quantum_ms == pytest.approx(5.0)
    assert config.progress_interval_ms == pytest.approx(250.0)
    assert config.watermark_idle_timeout == 0  # 0: hold the watermark back for ever
    assert config.activities is None
    assert config.batch_size == 9


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CADENZA_SPAN_SAMPLE_RATIO", "0"),
        ("CADENZA_SPAN_SAMPLE_RATIO", "1.5"),
        ("CADENZA_QUANTUM_MS", "0"),
        ("CADENZA_RUN_SLICE", "60"),
        ("CADENZA_PARTITIONS", "0"),
        ("CADENZA_STATE_STORE", "floppy"),
        ("CADENZA_FETCH_WAIT_MS", "0"),
        ("CADENZA_FETCH_WAIT_MS", "10001"),
    ],
)
def test_a_bad_value_is_a_config_error_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        WorkerConfig.load()


def test_worker_takes_its_settings_from_the_config() -> None:
    config = WorkerConfig(
        group="g-config", batch_size=7, max_buffered=123, quantum_records=3, quantum_ms=5.0, run_slice=0.5
    )
    worker = Worker([_pipeline()], KafkaSettings(), config)
    assert worker.config is config and worker.group == "g-config"
    assert (worker.config.batch_size, worker.config.max_buffered, worker.config.run_slice) == (7, 123, 0.5)
    assert worker.config.progress_interval_ms == pytest.approx(50.0)
    assert worker.config.activities == config.activities_topic


def test_every_lane_fetches_with_the_configured_broker_wait() -> None:
    worker = Worker([_pipeline()], KafkaSettings(), WorkerConfig(fetch_wait_ms=250))
    assert [lane.fetch["fetch.wait.max.ms"] for lane in worker.layout.lanes] == [250]
    with pytest.raises(ConfigError, match="fetch_wait"):
        WorkerConfig.load(fetch_wait_ms=0)


def _cli(*args: str, **env: str) -> Any:
    return CliRunner().invoke(app, ["worker", "no_such_module_needed", *args], env=env)


def test_the_cli_checks_exclusive_bounds_through_the_model() -> None:
    result = _cli("--span-sample-ratio", "0")
    assert result.exit_code != 0
    assert "span_sample_ratio" in result.output and "CADENZA_SPAN_SAMPLE_RATIO" in result.output


def test_the_cli_reads_inclusive_bounds_from_the_model_for_options_and_variables() -> None:
    result = _cli(CADENZA_BATCH_SIZE="0")
    assert result.exit_code == 2  # click's usage error, before anything starts
    assert "batch-size" in result.output
