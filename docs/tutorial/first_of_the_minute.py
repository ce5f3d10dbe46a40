"""A user's first click, then nothing for that user until a minute of event time has passed."""

from typing import Any

from cadenza import Pipeline, Processor, ProcessorContext, ProcessorRecord


class FirstOfTheMinute(Processor):
    """Emit a user's first click, then nothing for that user until a minute of event time passed."""

    def init(self, context: ProcessorContext) -> None:
        self.ctx = context

    def process(self, record: ProcessorRecord) -> None:
        if self.ctx.state is None:
            self.ctx.state = record.timestamp
            self.ctx.schedule_event_timer(record.timestamp + 60)
            self.ctx.forward(record.value)

    def on_event_timer(self, key: Any, when: float) -> None:
        self.ctx.state = None


first_clicks = Pipeline("first-clicks", tenant="ads", latency_target="250ms")
first_clicks.source("clicks", key=str, timestamp="ts").process(FirstOfTheMinute).sink("first-clicks")
