"""docker/grafana/cadenza.json queries only metrics cadenza declares, and the stack provisions it.

A renamed metric would leave a Grafana panel silently empty, so every ``cadenza_*`` name in a query
must be the exposition name of a metric in ``cadenza/infra/metrics/names.py`` (counters gain
``_total``, histograms are queried through ``_bucket``/``_sum``/``_count``), and every label a query
groups by must be one of that metric's labels (or one Prometheus adds).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cadenza.infra.metrics.names import ALL_METRICS, MetricDef, MetricKind

DOCKER = Path(__file__).resolve().parents[2] / "docker"
DASHBOARD = DOCKER / "grafana" / "cadenza.json"
PROMETHEUS_LABELS = {"instance", "job", "le"}

_METRIC = re.compile(r"\bcadenza_[a-z0-9_]+")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


def exposed() -> dict[str, MetricDef]:
    """Every series name a query may use, mapped to its declaration."""
    names: dict[str, MetricDef] = {}
    for metric in ALL_METRICS:
        if metric.kind is MetricKind.HISTOGRAM:
            for suffix in ("_bucket", "_sum", "_count"):
                names[metric.name + suffix] = metric
        else:
            names[metric.sample_name] = metric
    return names


def panels() -> list[dict[str, Any]]:
    """The panels that query; a row only groups the panels below it and has no query of its own."""
    document: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [panel for panel in document["panels"] if panel["type"] != "row"]


def queries() -> list[tuple[str, str]]:
    found = [(panel["title"], target["expr"]) for panel in panels() for target in panel["targets"]]
    assert found, "the dashboard has no queries"
    return found


def test_the_dashboard_covers_what_an_operator_asks_about() -> None:
    used = {name for _, expr in queries() for name in _METRIC.findall(expr)}
    for needed in (
        "cadenza_deadlines_met_total",
        "cadenza_deadlines_missed_total",
        "cadenza_e2e_latency_seconds_bucket",
        "cadenza_latency_target_seconds",
        "cadenza_queue_wait_seconds_bucket",
        "cadenza_records_consumed_total",
        "cadenza_buffered_records",
        "cadenza_paused_partitions",
        "cadenza_records_dead_lettered_total",
        "cadenza_worker_restarts_total",
        "cadenza_worker_stalls_total",
        "cadenza_lessees",
        "cadenza_lessee_leases_total",
        "cadenza_lessee_releases_total",
        "cadenza_lessee_seconds_total",
        "cadenza_lessee_handoff_seconds_total",
        "cadenza_lessee_handed_calls_total",
        "cadenza_lessor_calls_total",
        "cadenza_lessee_timeouts_total",
        "cadenza_lessee_deaths_total",
        "cadenza_lessee_abandoned_total",
        "cadenza_lessee_merge_seconds_total",
    ):
        assert needed in used, f"no panel queries {needed}"


@pytest.mark.parametrize(("title", "expr"), queries())
def test_every_queried_metric_and_label_is_declared(title: str, expr: str) -> None:
    declared = exposed()
    metrics = _METRIC.findall(expr)
    assert metrics, f"{title}: {expr!r} queries no cadenza metric"
    unknown = [name for name in metrics if name not in declared]
    assert not unknown, f"{title}: {unknown} are not declared in cadenza/infra/metrics/names.py"
    labels = set().union(*(declared[name].labels for name in metrics)) | PROMETHEUS_LABELS
    for group in _BY.findall(expr):
        grouped = {label.strip() for label in group.split(",") if label.strip()}
        assert grouped <= labels, f"{title}: grouping by {grouped - labels}, which {metrics} do not have"


def test_the_provisioned_data_source_is_the_one_the_panels_use() -> None:
    provisioned = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    uids = {source["uid"] for source in provisioned["datasources"]}
    used = {panel["datasource"]["uid"] for panel in panels()}
    used |= {target["datasource"]["uid"] for panel in panels() for target in panel["targets"]}
    assert used <= uids, f"panels use data sources {used - uids} that are not provisioned"
    providers = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/cadenza.yaml").read_text())
    path = providers["providers"][0]["options"]["path"]
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/cadenza.json:{path}/cadenza.json:ro" in mounts


def test_prometheus_scrapes_the_workers_metrics_port() -> None:
    config = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    port = int(compose["services"]["worker"]["environment"]["CADENZA_METRICS_PORT"])
    targets = [sd for job in config["scrape_configs"] for sd in job.get("dns_sd_configs", [])]
    assert any("worker" in sd["names"] and sd["port"] == port for sd in targets)
