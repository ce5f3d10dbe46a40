"""``cadenza stats``: the Structured Streaming job that turns spans into cost feedback for workers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from cadenza.cli._spark_run import (
    KafkaFormat,
    KafkaFormatOption,
    SparkConfOption,
    parse_spark_conf,
    progress_line,
    run_until_stopped,
    start_spark,
)
from cadenza.cli.console import command_errors, console
from cadenza.infra.metrics.topics import DEFAULT_FEEDBACK_TOPIC, DEFAULT_SPANS_TOPIC
from cadenza.settings import KafkaSettings


@command_errors
def stats_command(
    metrics_topic: Annotated[
        str, typer.Option(help="Topic the workers write spans to.")
    ] = DEFAULT_SPANS_TOPIC,
    feedback_topic: Annotated[
        str, typer.Option(help="Topic the feedback records go to (workers read it).")
    ] = DEFAULT_FEEDBACK_TOPIC,
    window: Annotated[str, typer.Option(help="Window length (a Spark interval).")] = "30 seconds",
    slide: Annotated[str, typer.Option(help="How often a new window starts.")] = "10 seconds",
    watermark: Annotated[
        str, typer.Option(help="How late a span may arrive and still count.")
    ] = "30 seconds",
    trigger: Annotated[str, typer.Option(help="Micro-batch interval.")] = "5 seconds",
    checkpoint: Annotated[
        Path, typer.Option(help="Checkpoint directory (offsets and window state survive restarts).")
    ] = Path(".cadenza/checkpoints/stats"),
    output_mode: Annotated[
        str, typer.Option(help="update: statistics while a window is open; append: once, final.")
    ] = "update",
    starting_offsets: Annotated[str, typer.Option(help="Where a new checkpoint starts reading.")] = "latest",
    max_records_per_trigger: Annotated[
        int | None,
        typer.Option(min=1, help="Most spans one micro-batch reads (default: all available)."),
    ] = None,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[2]",
    kafka_format: KafkaFormatOption = KafkaFormat.AUTO,
    spark_conf: SparkConfOption = None,
) -> None:
    """Compute per-operator latency statistics over sliding windows; publish them as feedback.

    Connection settings come from CADENZA_* variables. Ctrl-C or SIGTERM stops the query cleanly;
    its checkpoint lets the next run continue where this one stopped.
    """
    from cadenza.feedback.stats_job import StatsConfig, start_stats  # noqa: PLC0415 - PySpark is optional

    settings = KafkaSettings.load()
    mode: Literal["update", "append"] = "append" if output_mode == "append" else "update"
    if output_mode not in ("update", "append"):
        raise typer.BadParameter("must be update or append", param_hint="--output-mode")
    config = StatsConfig(
        metrics_topic=metrics_topic,
        feedback_topic=feedback_topic,
        window=window,
        slide=slide,
        watermark=watermark,
        trigger=trigger,
        checkpoint=checkpoint,
        starting_offsets=starting_offsets,
        max_records_per_trigger=max_records_per_trigger,
        output_mode=mode,
    )
    spark = start_spark(
        "cadenza-stats", master, kafka_format=kafka_format, spark_conf=parse_spark_conf(spark_conf)
    )
    try:
        job = start_stats(spark, settings, config)
        console.print(
            f"cadenza stats: {metrics_topic} -> {feedback_topic} at {settings.bootstrap_servers}; "
            "Ctrl-C or SIGTERM stops",
            highlight=False,
        )
        run_until_stopped(
            [job.query],
            lambda: {
                "progress": progress_line(job.query),
                "feedback records": str(job.written),
                "malformed spans skipped": str(job.malformed),
            },
            job.stop,
        )
        console.print(f"stopped: {job.written} feedback records, {job.malformed} malformed spans skipped")
    finally:
        spark.stop()
