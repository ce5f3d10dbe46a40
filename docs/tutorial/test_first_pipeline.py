from cadenza import VirtualClock
from cadenza.testing import PipelineDriver

from first_pipeline import Click, clicks


def test_clicks_are_counted_per_user_and_second() -> None:
    with PipelineDriver([clicks], clock=VirtualClock(1_700_000_000.0)) as driver:
        driver.pipe("clicks", Click(user="ann", page="/", ts=10.2))
        driver.pipe("clicks", Click(user="ann", page="/health", ts=10.4))  # filtered out
        driver.pipe("clicks", Click(user="bob", page="/", ts=10.5))
        driver.pipe("clicks", Click(user="ann", page="/", ts=11.5))  # closes [10, 11)
        driver.pipe("clicks", Click(user="bob", page="/", ts=10.9))  # too late for [10, 11)
        driver.pipe("clicks", b"not json")

        results = driver.outputs("clicks-per-user")
        counts = {(r.key, r.value["window_start"]): r.value["value"] for r in results}
        assert counts == {("ann", 10.0): 1, ("bob", 10.0): 1}
        assert [r.value["user"] for r in driver.late("clicks-per-user")] == ["bob"]
        assert driver.dead_letters("clicks-per-user")[0].headers["cadenza-error-type"] == b"ValidationError"
