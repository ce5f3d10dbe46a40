"""The pool's view for DS2: the dataflow of sub-topologies, scraped rates, and the window built from them."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from cadenza.infra.metrics import names
from cadenza.infra.metrics.prometheus import PrometheusExporter
from cadenza.pipelines import Pipeline
from cadenza.scaling import InstanceRates, decide
from cadenza.scaling.observe import dataflow, parse_rates, rate_window
from cadenza.worker.engine.topology import split


class Item(BaseModel):
    id: int
    user: str


def keyed_flow() -> tuple[str, str]:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in", value=Item).key_by(lambda x: x.user).map(lambda x: x.id).sink("out")
    graph = pipeline.compile()
    subs = split(graph)
    repartition = next(s.input_topic for s in subs if s.input_kind == "repartition")
    return graph.name, repartition


def test_dataflow_follows_the_topics() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in", value=Item).key_by(lambda x: x.user).map(lambda x: x.id).sink("out")
    graph = pipeline.compile()
    flow = dataflow([(graph.name, split(graph))])
    _, repartition = keyed_flow()
    assert flow.sources == {"p/source:in": "in"}
    assert flow.sub_topologies == {"p/in": ("p", "in"), f"p/{repartition}": ("p", repartition)}
    assert flow.edges == [("p/source:in", "p/in"), ("p/in", f"p/{repartition}")]


def test_parse_rates_reads_what_a_worker_exports() -> None:
    exporter = PrometheusExporter()
    values = {
        names.TRUE_PROCESSING_RATE: 100.0,
        names.TRUE_OUTPUT_RATE: 50.0,
        names.OBSERVED_PROCESSING_RATE: 40.0,
        names.OBSERVED_OUTPUT_RATE: 20.0,
    }

    def reader(v: float) -> Callable[[], dict[tuple[str, ...], float]]:
        return lambda: {("t", "p", "in"): v, ("t", "p", "r"): 2 * v}

    for metric, value in values.items():
        exporter.register_callback(metric, reader(value))
    rates = parse_rates(exporter.render().decode())
    assert rates == {
        ("p", "in"): InstanceRates(100.0, 50.0, 40.0, 20.0),
        ("p", "r"): InstanceRates(200.0, 100.0, 80.0, 40.0),
    }


def test_rate_window_counts_busy_workers_only_and_feeds_ds2() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in", value=Item).key_by(lambda x: x.user).map(lambda x: x.id).sink("out")
    graph = pipeline.compile()
    flow = dataflow([(graph.name, split(graph))])
    _, repartition = keyed_flow()
    workers = [
        {
            ("p", "in"): InstanceRates(200.0, 200.0, 100.0, 100.0),
            ("p", repartition): InstanceRates(50.0, 50.0),
        },
        {("p", "in"): InstanceRates(0.0, 0.0), ("p", repartition): InstanceRates(50.0, 50.0)},  # owns no "in"
    ]
    window = rate_window(flow, workers, {"in": 300.0}, {"in": 4, repartition: 8})
    assert window.operators == {"p/source:in": 1, "p/in": 1, f"p/{repartition}": 2}
    assert window.partitions == {"p/in": 4, f"p/{repartition}": 8}
    assert window.source_rates == {"p/source:in": 300.0}
    # 300/s at 200 per busy second -> 2 instances; its 300/s output at 50 per busy second -> 6
    assert decide(window.operators, window.edges, window.rates, window.source_rates) == {
        "p/source:in": 1,
        "p/in": 2,
        f"p/{repartition}": 6,
    }


def test_a_sub_topology_nobody_ran_is_one_idle_instance() -> None:
    pipeline = Pipeline("p", tenant="t", latency_target="1s")
    pipeline.source("in", value=Item).map(lambda x: x.id).sink("out")
    graph = pipeline.compile()
    flow = dataflow([(graph.name, split(graph))])
    window = rate_window(flow, [], {}, {"in": 2})
    assert window.rates["p/in"] == [InstanceRates(0.0, 0.0)]
    assert decide(window.operators, window.edges, window.rates, window.source_rates)["p/in"] == 0
