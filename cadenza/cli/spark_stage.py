"""``cadenza spark-stage``: run the ``on_spark`` stages of a module's pipelines on Spark."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

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
from cadenza.errors import ConfigError
from cadenza.pipelines import PipelineGraph, load_pipelines
from cadenza.settings import KafkaSettings


def select_stages(graphs: list[PipelineGraph], wanted: list[str]) -> list[tuple[PipelineGraph, str]]:
    """The (graph, stage id) pairs to run: all, or those named ``ID``, ``PIPELINE/ID`` or by name."""
    found = [(graph, stage.id, stage.name) for graph in graphs for stage in graph.spark_stages]
    if not found:
        raise ConfigError("the modules declare no Spark stage (no .on_spark(...) step)")
    if not wanted:
        return [(graph, stage_id) for graph, stage_id, _ in found]
    chosen: list[tuple[PipelineGraph, str]] = []
    for name in wanted:
        matches = [
            (graph, stage_id)
            for graph, stage_id, stage_name in found
            if name in (stage_id, stage_name, f"{graph.name}/{stage_id}")
        ]
        if not matches:
            known = ", ".join(f"{graph.name}/{stage_id}" for graph, stage_id, _ in found)
            raise ConfigError(f"no Spark stage {name!r}; the modules have: {known}")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


@command_errors
def spark_stage_command(
    modules: Annotated[
        list[str], typer.Argument(help="Modules declaring pipelines: dotted names or .py paths.")
    ],
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Run only this stage (ID, PIPELINE/ID or name).")
    ] = None,
    checkpoint_dir: Annotated[Path, typer.Option(help="Checkpoints go to DIR/PIPELINE/STAGE.")] = Path(
        ".cadenza/checkpoints"
    ),
    trigger: Annotated[str, typer.Option(help="Micro-batch interval.")] = "1 second",
    starting_offsets: Annotated[
        str, typer.Option(help="Where a new checkpoint starts reading.")
    ] = "earliest",
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[2]",
    kafka_format: KafkaFormatOption = KafkaFormat.AUTO,
    spark_conf: SparkConfOption = None,
) -> None:
    """Run the Structured Streaming queries of the pipelines' on_spark stages until Ctrl-C or SIGTERM."""
    from cadenza.spark_stages.runner import start_stage  # noqa: PLC0415 - PySpark is optional

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    settings = KafkaSettings.load()
    graphs = [pipeline.compile() for module in modules for pipeline in load_pipelines(module)]
    chosen = select_stages(graphs, stage or [])
    spark = start_spark(
        "cadenza-spark-stage", master, kafka_format=kafka_format, spark_conf=parse_spark_conf(spark_conf)
    )
    try:
        jobs = [
            start_stage(
                spark,
                graph,
                stage_id,
                settings,
                checkpoint=checkpoint_dir / graph.name / stage_id,
                trigger=trigger,
                starting_offsets=starting_offsets,
            )
            for graph, stage_id in chosen
        ]
        for job in jobs:
            console.print(
                f"stage {job.stage.pipeline}/{job.stage.id}: "
                f"{job.stage.input_topic} -> {job.stage.output_topic}",
                highlight=False,
            )

        def status() -> dict[str, str]:
            return {
                f"{job.stage.pipeline}/{job.stage.id}": (
                    f"{progress_line(job.query)}; {job.written} written, {job.dead_letters} dead letters"
                )
                for job in jobs
            }

        def stop() -> None:
            for job in jobs:
                job.stop()

        run_until_stopped([q for job in jobs for q in (job.query, job.dead_letter_query)], status, stop)
    finally:
        spark.stop()
