"""The docs' example code runs as the pages and the README show it.

The getting-started pages include ``docs/tutorial/*.py`` as they are (pymdownx.snippets), and the
README repeats the first pipeline and its test word for word, so these tests run exactly what a
newcomer reads: the tutorial's own pytest functions, then a few more checks of what the pages say
about the results. No broker: ``PipelineDriver`` is in-memory.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from cadenza import VirtualClock, describe
from cadenza.testing import PipelineDriver

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial"
#: Page -> the tutorial files it includes.
INCLUDES = {
    "docs/getting-started/first-pipeline.md": ["first_pipeline.py", "test_first_pipeline.py"],
    "docs/getting-started/first-processor.md": ["quiet_devices.py", "test_quiet_devices.py"],
    "docs/how-to/processor.md": ["quiet_devices.py", "test_quiet_devices.py", "first_of_the_minute.py"],
}


@pytest.fixture
def tutorial(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The tutorial directory on ``sys.path``, as pytest puts a user's test directory there; the
    ``importlib`` module to import its files by name (fresh for each test)."""
    names = [path.stem for path in TUTORIAL.glob("*.py")]
    monkeypatch.syspath_prepend(str(TUTORIAL))
    for name in names:
        sys.modules.pop(name, None)
    yield importlib
    for name in names:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("page", sorted(INCLUDES))
def test_the_pages_include_the_tutorial_files_rather_than_copies(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for name in INCLUDES[page]:
        assert f'--8<-- "docs/tutorial/{name}"' in text, f"{page} does not include {name}"
    assert "```python\nfrom cadenza" not in text, f"{page} has a copy of example code: include the file"


def test_the_readme_shows_the_first_pipeline_and_its_test_word_for_word() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert blocks == [
        (TUTORIAL / "first_pipeline.py").read_text(encoding="utf-8"),
        (TUTORIAL / "test_first_pipeline.py").read_text(encoding="utf-8"),
    ]


def test_the_first_pipelines_own_test_passes(tutorial: ModuleType) -> None:
    tutorial.import_module("test_first_pipeline").test_clicks_are_counted_per_user_and_second()


def test_the_first_pipeline_carries_its_target_and_keeps_the_open_window(tutorial: ModuleType) -> None:
    """What docs/how-to/testing.md says of the first pipeline's test: the result's context carries the
    target on, and ann's window [11, 12) is still open in the count's state."""
    first = tutorial.import_module("first_pipeline")
    with PipelineDriver([first.clicks], clock=VirtualClock(1_700_000_000.0)) as driver:
        for user, ts in (("ann", 10.2), ("bob", 10.5), ("ann", 11.5)):
            driver.pipe("clicks", first.Click(user=user, page="/", ts=ts))
        context = driver.outputs("clicks-per-user")[0].context
        assert context is not None and context.latency_target == 0.25
        assert driver.state("clicks-per-user", "4-count")["ann"][0] == [[11.0, 12.0, 1]]


def test_the_processor_tutorials_own_test_passes(tutorial: ModuleType) -> None:
    tutorial.import_module("test_quiet_devices").test_a_device_quiet_for_a_minute_raises_one_alert()


def test_the_first_pipeline_reads_as_the_page_describes_it(tutorial: ModuleType) -> None:
    """The first-pipeline page prints ``cadenza describe``'s output for the file: it must be current."""
    first = tutorial.import_module("first_pipeline")
    page = (ROOT / "docs/getting-started/first-pipeline.md").read_text(encoding="utf-8")
    shown = page.split("$ cadenza describe first_pipeline.py\n", 1)[1].split("```", 1)[0]
    assert describe(first.clicks).rstrip() == shown.rstrip()
