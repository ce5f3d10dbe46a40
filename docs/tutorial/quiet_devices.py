"""Alert when a device goes quiet: no reading for 60 s of event time."""

from typing import Any

from cadenza import Pipeline, Processor, ProcessorContext, ProcessorRecord


class QuietAlert(Processor):
    """Count a device's readings; alert when it sends nothing for 60 s of event time."""

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        ctx = self.ctx
        state = ctx.state or {"count": 0, "deadline": None}
        if state["deadline"] is not None:
            ctx.cancel_event_timer(state["deadline"])
        deadline = record.timestamp + 60
        ctx.schedule_event_timer(deadline)
        ctx.state = {"count": state["count"] + 1, "deadline": deadline}

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.forward({"device": key, "quiet_since": when - 60, "readings": self.ctx.state["count"]})
        self.ctx.state = None  # forget the device until it speaks again


devices = Pipeline("quiet-devices", tenant="ops", latency_target="1s")
devices.source("readings", key=str, timestamp="ts").process(QuietAlert).sink("alerts")
