"""``cadenza analyze``: where the time of the worker pool goes, from the workers' activity traces.

Reads the activities topic (workers started with ``--activities-topic``) over a time range or live
(``--follow``), computes SnailTrail's critical participation per tumbling window and prints the
summaries (by kind, worker, operator, channel) as tables; optionally writes them as JSON and plots
them as a PNG, and publishes each window's summary on the feedback topic (JSON, header
``cadenza-kind: critical-participation``; the workers' cost-feedback reader skips it as not theirs).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cadenza.analysis import Activity, WindowSummary, top, window_summaries
from cadenza.analysis.kafka_read import TraceReader
from cadenza.analysis.kafka_trace import ACTIVITIES_TOPIC
from cadenza.cli.console import command_errors, console
from cadenza.cli.stop_signals import stop_on_signals
from cadenza.durations import parse_duration
from cadenza.errors import CadenzaError
from cadenza.feedback.records import CRITICAL_PARTICIPATION_KIND, KIND_HEADER
from cadenza.infra.kafka.clients import flush_or_raise, make_producer
from cadenza.infra.metrics.topics import DEFAULT_FEEDBACK_TOPIC
from cadenza.settings import KafkaSettings

SUMMARY_HEADER = (KIND_HEADER, CRITICAL_PARTICIPATION_KIND)


def parse_time(value: str) -> float:
    """Epoch seconds, an ISO-8601 time, or ``-DURATION`` (that long before now)."""
    text = value.strip()
    if text.startswith("-"):
        return time.time() - parse_duration(text[1:], what="--from/--to offset")
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise CadenzaError(
            f"{value!r} is not a time: use epoch seconds, ISO-8601 or -DURATION (e.g. -5m)"
        ) from None


def summary_table(summary: WindowSummary, n: int) -> Table:
    start = datetime.fromtimestamp(summary.start).strftime("%H:%M:%S.%f")[:-3]
    table = Table(title=f"window {start} + {summary.end - summary.start:g}s  ({summary.paths} paths)")
    table.add_column("by", style="bold")
    table.add_column("entry")
    table.add_column("CP share", justify="right")
    for label, shares in (
        ("kind", summary.by_kind),
        ("worker", summary.by_worker),
        ("operator", summary.by_operator),
        ("channel", summary.by_channel),
    ):
        for i, (key, share) in enumerate(top(shares, n)):
            table.add_row(label if i == 0 else "", key, f"{share:.1%}")
    return table


def write_png(summaries: Sequence[WindowSummary], path: Path) -> None:
    """CP share by kind over time (stacked) and per worker over time."""
    try:
        import matplotlib  # noqa: PLC0415 - optional (the "analyze" extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise CadenzaError("--png needs matplotlib: pip install 'cadenza[analyze]'") from None
    # Each window's value holds until its end: repeat the last one at the end of the last window.
    times = [s.start - summaries[0].start for s in summaries] + [summaries[-1].end - summaries[0].start]
    shown = [*summaries, summaries[-1]]
    kinds = sorted({k for s in summaries for k in s.by_kind})
    workers = sorted({w for s in summaries for w in s.by_worker})
    fig, (ax_kind, ax_worker) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    ax_kind.stackplot(
        times, [[s.by_kind.get(k, 0.0) for s in shown] for k in kinds], labels=kinds, step="post"
    )
    ax_kind.set_ylabel("CP share by kind")
    ax_kind.legend(loc="upper left", fontsize="small", ncol=3)
    for w in workers:
        ax_worker.step(times, [s.by_worker.get(w, 0.0) for s in shown], where="post", label=w)
    ax_worker.set_ylabel("CP share by worker")
    ax_worker.set_xlabel("seconds since the first window")
    ax_worker.legend(loc="upper left", fontsize="small", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class Publisher:
    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self.producer, _ = make_producer(settings)
        self.timeout = settings.request_timeout_ms / 1000.0

    def publish(self, summaries: Sequence[WindowSummary]) -> None:
        for s in summaries:
            self.producer.produce(
                self.topic,
                json.dumps(s.to_json()).encode(),
                CRITICAL_PARTICIPATION_KIND,
                headers=[SUMMARY_HEADER],
            )
        flush_or_raise(self.producer, None, self.timeout)


def _report(summaries: Sequence[WindowSummary], n: int) -> None:
    for s in summaries:
        console.print(summary_table(s, n))


def _range_end(to: str | None, begin: float) -> float:
    """``--to`` as epoch seconds (now without it), refused unless after ``begin``."""
    end = parse_time(to) if to is not None else time.time()
    if end <= begin:
        raise CadenzaError(f"--to ({end}) must be after --from ({begin})")
    return end


@command_errors
def analyze_command(
    topic: Annotated[str, typer.Option(help="The activities topic the workers write to.")] = ACTIVITIES_TOPIC,
    window: Annotated[str, typer.Option(help="Window length (e.g. 10s).")] = "10s",
    from_: Annotated[
        str | None, typer.Option("--from", help="Start: epoch seconds, ISO-8601 or -DURATION (default: -5m).")
    ] = None,
    to: Annotated[str | None, typer.Option(help="End (default: now). Ignored with --follow.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep reading; report each window as it closes.")
    ] = False,
    grace: Annotated[
        str, typer.Option(help="With --follow: how long after a window ends its batches may still arrive.")
    ] = "3s",
    top_n: Annotated[int, typer.Option("--top", min=1, help="Entries per summary.")] = 5,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the summaries here as JSON.")] = None,
    png: Annotated[
        Path | None, typer.Option(help="Plot CP share by kind and by worker over time here.")
    ] = None,
    publish: Annotated[
        bool, typer.Option(help="Publish each window's summary on the feedback topic.")
    ] = True,
    feedback_topic: Annotated[
        str, typer.Option(help="Where summaries are published.")
    ] = DEFAULT_FEEDBACK_TOPIC,
    spark: Annotated[
        bool,
        typer.Option(
            "--spark", help="Group the windows in Spark (local[2]; for large pools). Not with --follow."
        ),
    ] = False,
    spark_master: Annotated[str, typer.Option(help="With --spark: the Spark master.")] = "local[2]",
) -> None:
    """Critical participation of the worker pool per window: which kind, worker, operator and hop."""
    settings = KafkaSettings.load()
    width = parse_duration(window, what="--window")
    begin = parse_time(from_) if from_ is not None else time.time() - 300.0
    begin = width * (begin // width)  # aligned windows, so that two runs report the same windows
    if spark:
        if follow:
            raise CadenzaError("--spark analyses a time range; it cannot be combined with --follow")
        end = _range_end(to, begin)
        found = _spark_summaries(settings, topic, begin, end, width, spark_master)
        _report(found, top_n)
        if publish and found:
            Publisher(settings, feedback_topic).publish(found)
        _write(found, topic, json_out, png)
        return
    reader = TraceReader(settings, topic, since=begin)
    publisher = Publisher(settings, feedback_topic) if publish else None
    results: list[WindowSummary] = []
    try:
        if not follow:
            end = _range_end(to, begin)
            trace = reader.read_to_end()
            workers = list(dict.fromkeys(a.worker for a in trace))
            lo = begin
            while trace and lo < end:
                summary = _window(trace, lo, min(lo + width, end), workers)
                if summary is not None:
                    results.append(summary)
                lo += width
            _report(results, top_n)
            if publisher is not None and results:
                publisher.publish(results)
        else:
            results = _follow(reader, begin, width, parse_duration(grace, what="--grace"), top_n, publisher)
    finally:
        reader.close()
    if reader.bad_batches:
        console.print(
            f"[yellow]{reader.bad_batches} of {reader.batches} batches did not decode (see the log)[/]"
        )
    _write(results, topic, json_out, png)


def _write(results: Sequence[WindowSummary], topic: str, json_out: Path | None, png: Path | None) -> None:
    if not results:
        console.print(f"no activities in {topic!r} over the range")
    if json_out is not None:
        json_out.write_text(json.dumps([s.to_json() for s in results], indent=2))
    if png is not None and results:
        write_png(results, png)


def _spark_summaries(
    settings: KafkaSettings, topic: str, begin: float, end: float, width: float, master: str
) -> list[WindowSummary]:
    """The windows of ``[begin, end)``, computed in Spark (:mod:`cadenza.analysis.spark_job`)."""
    from cadenza.infra.spark import require_pyspark, spark_session  # noqa: PLC0415 - PySpark is optional

    require_pyspark()  # before the job's module, whose imports need the `spark` extra
    from cadenza.analysis.spark_job import spark_window_summaries  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = spark_session("cadenza-analyze", master=master, ui=False)
    session.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="cadenza-analyze-") as tmp:
            analysis = spark_window_summaries(
                session, settings, topic, begin=begin, end=end, width=width, workdir=Path(tmp)
            )
    finally:
        session.stop()
    for lo, reason in sorted(analysis.skipped.items()):
        console.print(f"[yellow]window at {lo:.3f} skipped: {reason}[/]", highlight=False)
    if analysis.bad_batches:
        console.print(f"[yellow]{analysis.bad_batches} batches did not decode[/]")
    return analysis.summaries


def _window(trace: Sequence[Activity], lo: float, hi: float, workers: Sequence[str]) -> WindowSummary | None:
    """One window's summary, or ``None`` (said on the console) if its trace cannot form a graph."""
    try:
        (summary,) = window_summaries(trace, lo, hi, hi - lo, workers=workers)
    except ValueError as exc:
        console.print(f"[yellow]window at {lo:.3f} skipped: {exc}[/]", highlight=False)
        return None
    return summary


def _follow(
    reader: TraceReader, begin: float, width: float, grace: float, n: int, publisher: Publisher | None
) -> list[WindowSummary]:
    """Report each window once ``grace`` has passed after its end; Ctrl-C or SIGTERM (a container's
    stop) ends the run and keeps the results, so ``--json`` is still written."""
    trace: list[Activity] = []
    workers: dict[str, None] = {}
    results: list[WindowSummary] = []
    lo = begin
    with stop_on_signals() as stop:
        try:
            while not stop.is_set():
                for a in reader.poll(0.5):
                    trace.append(a)
                    workers[a.worker] = None
                while time.time() >= lo + width + grace:
                    summary = _window(trace, lo, lo + width, list(workers)) if trace else None
                    if summary is not None:
                        _report([summary], n)
                        results.append(summary)
                        if publisher is not None:
                            publisher.publish([summary])
                    lo += width
                    trace = [a for a in trace if a.end >= lo]
        except KeyboardInterrupt:
            pass
    return results
