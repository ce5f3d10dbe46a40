"""The built site holds what the issue asks of it, generated from the code: every public name's API
entry, every setting, every command, the benchmark results and the tutorial code as the files have it.
No browser (tests/docs/test_site.py opens the site in one) and no broker."""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import typer
from typer.core import TyperGroup

import cadenza
from cadenza.cli.app import app
from cadenza.scaling.controller import ControllerSettings
from cadenza.settings import KafkaSettings
from cadenza.worker.config import ProcessConfig, WorkerConfig

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("cadenza_docs_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(page: Path) -> str:
    """The page's article as plain text (tags dropped, entities decoded)."""
    raw = page.read_text(encoding="utf-8")
    article = raw[raw.index("<article") : raw.index("</article>")]
    return html.unescape(re.sub(r"<[^>]+>", "", article))


def test_every_public_name_has_its_api_entry(built_site: Path) -> None:
    page = (built_site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    ids = set(re.findall(r'id="(cadenza\.[\w.]+)"', page))
    names = [name for name in cadenza.__all__ if name != "__version__"]
    missing = [name for name in names if not any(i.endswith(f".{name}") for i in ids)]
    assert missing == []


def test_the_driver_is_documented_from_its_docstring(built_site: Path) -> None:
    text = _text(built_site / "reference" / "testing" / "index.html")
    assert "Runs pipelines in this process with no broker" in text
    assert ":class:" not in text and ":meth:" not in text  # Sphinx roles became code spans


def test_every_setting_is_on_the_settings_page(built_site: Path) -> None:
    text = _text(built_site / "reference" / "settings" / "index.html")
    for model in (KafkaSettings, WorkerConfig, ProcessConfig, ControllerSettings):
        prefix = model.model_config.get("env_prefix", "")
        for name, field in model.model_fields.items():
            assert f"{prefix}{name.upper()}" in text
            assert field.description is not None
            assert " ".join(field.description.split()[:6]) in text


def test_every_command_and_worker_option_is_on_the_cli_page(built_site: Path) -> None:
    text = _text(built_site / "reference" / "cli" / "index.html")
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    for name, command in root.commands.items():
        assert f"cadenza {name}" in text
        for sub in getattr(command, "commands", {}):
            assert f"cadenza {name} {sub}" in text
    for name in (*WorkerConfig.model_fields, *ProcessConfig.model_fields):
        assert f"--{name.replace('_', '-')}" in text


@pytest.mark.parametrize(
    ("page", "name"),
    [
        ("getting-started/first-pipeline", "first_pipeline.py"),
        ("getting-started/first-pipeline", "test_first_pipeline.py"),
        ("getting-started/first-processor", "quiet_devices.py"),
        ("getting-started/first-processor", "test_quiet_devices.py"),
        ("how-to/processor", "first_of_the_minute.py"),
    ],
)
def test_the_tutorial_pages_show_the_files_as_they_are(built_site: Path, page: str, name: str) -> None:
    code = (ROOT / "docs" / "tutorial" / name).read_text(encoding="utf-8")
    assert code.strip() in _text(built_site / page / "index.html")


def test_the_benchmarks_page_is_the_current_results_file(built_site: Path) -> None:
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    title = results.splitlines()[0].lstrip("# ").strip()
    page = built_site / "benchmarks" / "RESULTS" / "index.html"
    assert title.replace("`", "") in _text(page)
    for image in re.findall(r'<img[^>]+src="([^"]+)"', page.read_text(encoding="utf-8")):
        assert (page.parent / image).resolve().is_file(), f"{image} is not in the site"


def test_links_of_the_included_results_are_kept_pointed_or_named() -> None:
    hook = _hook()

    def rewrite(markdown: str) -> str:
        return str(hook._LINK.sub(lambda match: hook._rewrite_link(match, "benchmarks/RESULTS.md"), markdown))

    # A file the site serves at its repository path: unchanged (a missing one too: strict fails on it).
    assert rewrite("![S1](results/x/s1.png)") == "![S1](results/x/s1.png)"
    # A page of the site: pointed at it.
    rule = "[rule](../docs/concepts/watermarks.md#the-rule)"
    assert rewrite(rule) == "[rule](../concepts/watermarks.md#the-rule)"
    # Markdown outside docs/ is no page of the site: named, not linked.
    assert rewrite("[notes](../README.md)") == "notes (`README.md` in the repository)"
    assert rewrite("[web](https://example.org/a.md)") == "[web](https://example.org/a.md)"


def test_the_readmes_links_lead_to_files_of_the_repository() -> None:
    """GitHub shows the README beside the Markdown of docs/, not the built site: its relative links
    must name files that exist (anchors are the site's business: mkdocs checks those)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith("#")]
    assert local, "the README links to nothing in the repository"
    assert [t for t in local if not (ROOT / t).exists()] == []
