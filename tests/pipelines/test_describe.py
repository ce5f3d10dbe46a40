from __future__ import annotations

from cadenza.pipelines import Pipeline, describe
from tests.pipelines import sample_pipelines


def test_describe_sample_module() -> None:
    text = describe([p.compile() for p in (sample_pipelines.clicks_per_user, sample_pipelines.enrich)])
    assert text == (
        "pipeline clicks-per-user\n"
        "  tenant:          ads (weight 2)\n"
        "  latency target:  250ms\n"
        "  sources:         clicks\n"
        "  sinks:           clicks-per-user\n"
        "  internal topics: clicks-per-user.3-key_by.repartition (repartition)\n"
        "                   clicks-per-user.4-count.changelog (changelog, compacted)\n"
        "                   clicks-per-user.dlq (dead letters)\n"
        "                   clicks-per-user.late (late records)\n"
        "  steps:\n"
        "    1-source  topic=clicks format=json value=Click event_time=ts  -> 2-filter\n"
        "    2-filter  filter not_health_check                             -> 3-key_by\n"
        "    3-key_by  key_by user_of (repartition)                        -> 4-count\n"
        "    4-count   count over tumbling 1s, lateness 200ms              -> 5-sink\n"
        "    5-sink    topic=clicks-per-user format=json\n"
        "\n"
        "pipeline enrich\n"
        "  tenant:          batch (weight 0.5)\n"
        "  latency target:  30s\n"
        "  sources:         orders\n"
        "  sinks:           orders-enriched\n"
        "  internal topics: enrich.dlq (dead letters)\n"
        "                   enrich.late (late records)\n"
        "  steps:\n"
        "    1-source  topic=orders format=json value=Order  -> 2-map\n"
        "    2-map     map enrich_order                      -> 3-sink\n"
        "    3-sink    topic=orders-enriched format=avro\n"
    )


def test_describe_branch_and_join_and_accepts_a_single_pipeline() -> None:
    pipeline = Pipeline("fraud", tenant="risk", latency_target="100ms")
    orders = pipeline.source("orders", timestamp=lambda o: o["ts"], max_out_of_orderness="2s").key_by(
        lambda o: o["user"], name="by_user"
    )
    payments = pipeline.source("payments", key=str)
    matched = orders.join(payments, within="5s")
    big, small = matched.branch(lambda pair: pair[0]["amount"] > 100, lambda pair: True)
    big.sink("alerts")
    small.sink("ok")
    text = describe(pipeline)
    assert text.endswith(
        "  steps:\n"
        "    1-source  topic=orders format=json event_time=function max_out_of_orderness=2s  -> 2-key_by\n"
        "    2-key_by  key_by by_user (repartition)                                          -> 4-join\n"
        "    3-source  topic=payments format=json key=str                                    -> 4-join\n"
        "    4-join    2-key_by with 3-source within 5s                                      -> 5-branch\n"
        "    5-branch  branch by <lambda>, <lambda>                                          "
        "-> [1] 6-sink, [2] 7-sink\n"
        "    6-sink    topic=alerts format=json\n"
        "    7-sink    topic=ok format=json\n"
    )
    assert "  latency target:  100ms\n" in text
    assert "                   fraud.4-join.changelog (changelog, compacted)\n" in text


def test_describe_nothing() -> None:
    assert describe([]) == "no pipelines\n"
