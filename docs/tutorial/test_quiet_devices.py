from cadenza import VirtualClock
from cadenza.testing import PipelineDriver

from quiet_devices import devices

START = 1_700_000_000.0


def test_a_device_quiet_for_a_minute_raises_one_alert() -> None:
    with PipelineDriver([devices], clock=VirtualClock(START)) as driver:
        driver.pipe("readings", {"ts": START}, key="d")
        driver.pipe("readings", {"ts": START + 10}, key="d")
        driver.pipe("readings", {"ts": START + 65}, key="e")  # d's timer (+70) not due yet
        assert driver.outputs("alerts") == []

        driver.pipe("readings", {"ts": START + 100}, key="e")  # the watermark passes +70
        alerts = [r.value for r in driver.outputs("alerts")]
        assert alerts == [{"device": "d", "quiet_since": START + 10, "readings": 2}]
        assert "d" not in driver.state("quiet-devices", "2-process")  # forgotten until it speaks again
