"""Clicks per user per second of event time, each count due 250 ms after its second closes."""

from pydantic import BaseModel

from cadenza import Pipeline, Tumbling


class Click(BaseModel):
    user: str
    page: str
    ts: float  # event time: seconds since the epoch


clicks = Pipeline("clicks-per-user", tenant="ads", latency_target="250ms")
(
    clicks.source("clicks", value=Click, timestamp="ts", max_out_of_orderness="100ms")
    .filter(lambda click: click.page != "/health")
    .key_by(lambda click: click.user)
    .window(Tumbling("1s"), allowed_lateness="200ms")
    .count()
    .sink("clicks-per-user")
)
