"""Worker discovery's pure parts: announcements, what a sequence of records means, and the
dashboard following announced workers (injected clock and scraper, no broker)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.dashboard import Dashboard, DiscoveredWorker, DiscoveredWorkers
from cadenza.scheduling.clock import VirtualClock
from cadenza.worker.announcer import Announcement, AnnouncementError, advertised_url, parse_announcement
from tests.dashboard.test_live import Pool, results


def announcement(
    worker_id: str = "w-1", url: str = "http://h:9000", heartbeat_at: float = 100.0
) -> Announcement:
    return Announcement(worker_id, url, "g", ("p1", "p2"), started_at=90.0, heartbeat_at=heartbeat_at)


def test_an_announcement_round_trips_and_a_tombstone_is_none() -> None:
    sent = announcement()
    assert parse_announcement(b"w-1", sent.to_json()) == sent
    assert parse_announcement(b"w-1", None) is None


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, announcement().to_json(), "key"),
        (b"other", announcement().to_json(), "is not the announced worker id"),
        (b"w-1", b"not json", "not JSON"),
        (b"w-1", b"[1, 2]", "not a JSON object"),
        (b"w-1", b"\xff\xfe", "not JSON"),
        (b"w-1", json.dumps({"worker_id": "w-1"}).encode(), "url"),
        (b"w-1", announcement(url="ftp://h:1").to_json(), "http"),
        (
            b"w-1",
            announcement().to_json().replace(b'"heartbeat_at": 100.0', b'"heartbeat_at": "soon"'),
            "epoch",
        ),
        (b"w-1", announcement().to_json().replace(b'"heartbeat_at": 100.0', b'"heartbeat_at": NaN'), "epoch"),
        (b"w-1", announcement().to_json().replace(b'["p1", "p2"]', b"[1]"), "pipelines"),
        (b"w-1", b"{" + b" " * 70_000 + b"}", "larger"),
    ],
)
def test_garbage_is_an_announcement_error(key: bytes | None, value: bytes, reason: str) -> None:
    with pytest.raises(AnnouncementError, match=reason):
        parse_announcement(key, value)


def test_advertised_url_names_the_host_others_can_dial() -> None:
    assert advertised_url("10.0.0.5", 9000) == "http://10.0.0.5:9000"
    assert advertised_url("0.0.0.0", 9000, hostname="worker-3") == "http://worker-3:9000"
    assert advertised_url("::", 9000, hostname="worker-3") == "http://worker-3:9000"
    assert advertised_url("::1", 9000) == "http://[::1]:9000"


def test_the_newest_announcement_counts_a_tombstone_removes_and_garbage_is_counted() -> None:
    found = DiscoveredWorkers()
    assert found.apply(b"w-1", announcement(heartbeat_at=100.0).to_json())
    assert found.apply(b"w-2", announcement("w-2", "http://k:1", heartbeat_at=95.0).to_json())
    assert found.apply(b"w-1", announcement(url="http://h:9001", heartbeat_at=104.0).to_json())
    assert not found.apply(b"w-1", b"garbage")
    assert not found.apply(None, None)
    assert found.skipped == 2 and len(found) == 2
    now = found.at(now=110.0, stale_after_s=10.0)
    assert set(now) == {"http://h:9001", "http://k:1"}  # the moved worker is at its new port only
    assert now["http://h:9001"] == DiscoveredWorker(
        announcement(url="http://h:9001", heartbeat_at=104.0), 6.0, False
    )
    assert now["http://k:1"].stale and now["http://k:1"].heartbeat_age_s == pytest.approx(15.0)
    assert found.apply(b"w-2", None)
    assert set(found.at(110.0, 10.0)) == {"http://h:9001"}


records = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.floats(0, 1000, allow_nan=False), st.just(-1.0)),
    ),
    max_size=30,
)


@given(records)
def test_discovered_workers_match_a_brute_force_replay(log: list[tuple[str, float | None]]) -> None:
    """Any sequence of announcements (heartbeat), tombstones (None) and garbage (-1): the workers
    shown are those whose last valid record is an announcement, with that record's heartbeat."""
    found = DiscoveredWorkers()
    for worker_id, heartbeat in log:
        value = (
            None
            if heartbeat is None
            else b"{oops"
            if heartbeat < 0
            else announcement(worker_id, f"http://{worker_id}:1", heartbeat).to_json()
        )
        found.apply(worker_id.encode(), value)
    expected: dict[str, float] = {}
    for worker_id, heartbeat in log:
        if heartbeat is None:
            expected.pop(worker_id, None)
        elif heartbeat >= 0:
            expected[worker_id] = heartbeat
    shown = found.at(now=500.0, stale_after_s=100.0)
    assert {url: w.announcement.heartbeat_at for url, w in shown.items()} == {
        f"http://{worker_id}:1": heartbeat for worker_id, heartbeat in expected.items()
    }
    assert all(w.stale == (500.0 - w.announcement.heartbeat_at > 100.0) for w in shown.values())
    assert found.skipped == sum(1 for _, heartbeat in log if heartbeat is not None and heartbeat < 0)


def test_the_dashboard_follows_announced_workers_and_keeps_the_named_ones() -> None:
    clock, pool = VirtualClock(1000.0), Pool()
    results(pool.add("named:1", {("BA", "BA-p"): 5.0}), "BA", met=2, missed=0, latency=0.1)
    results(pool.add("http://found:1", {("LS", "LS-p"): 0.05}), "LS", met=1, missed=1, latency=0.2)
    topic = DiscoveredWorkers()
    board = Dashboard(
        ["named:1"], clock=clock, scraper=pool.scrape, discovery=lambda now: topic.at(now, stale_after_s=15.0)
    )
    board.poll()
    assert [w["url"] for w in board.view()["workers"]] == ["named:1"]

    topic.apply(b"w-1", announcement("w-1", "http://found:1", heartbeat_at=clock.now()).to_json())
    clock.advance(1.0)
    board.poll()
    workers = {w["url"]: w for w in board.view()["workers"]}
    assert workers["http://found:1"]["status"] == "up"
    assert workers["http://found:1"]["worker_id"] == "w-1"
    assert {p["tenant"] for p in board.view()["pipelines"] if not p["stale"]} == {"BA", "LS"}

    clock.advance(20.0)  # its endpoint still answers, but it stopped announcing: stale, not counted
    board.poll()
    view = board.view()
    found = next(w for w in view["workers"] if w["url"] == "http://found:1")
    assert found["status"] == "stale" and "no heartbeat" in found["error"]
    assert next(p for p in view["pipelines"] if p["tenant"] == "LS")["stale"] is True

    topic.apply(b"w-1", None)  # its tombstone: gone from the page; the named worker stays
    board.poll()
    assert [w["url"] for w in board.view()["workers"]] == ["named:1"]


def test_a_dashboard_needs_a_worker_or_discovery() -> None:
    with pytest.raises(ValueError, match="discovery topic"):
        Dashboard([])
    board = Dashboard([], discovery=lambda now: {})
    board.poll()
    assert board.view()["workers"] == []
    board.close()
