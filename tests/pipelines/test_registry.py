from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from cadenza.pipelines import PipelineDefinitionError, load_pipelines
from tests.pipelines import sample_pipelines

SAMPLE_FILE = Path(sample_pipelines.__file__)


def test_load_from_dotted_name() -> None:
    pipelines = load_pipelines("tests.pipelines.sample_pipelines")
    assert [p.name for p in pipelines] == ["clicks-per-user", "enrich"]
    assert pipelines[0] is sample_pipelines.clicks_per_user
    assert [(p.tenant, p.latency_target_s, p.tenant_weight) for p in pipelines] == [
        ("ads", 0.25, 2.0),
        ("batch", 30.0, 0.5),
    ]


def test_load_from_an_imported_module() -> None:
    assert load_pipelines(sample_pipelines) == [sample_pipelines.clicks_per_user, sample_pipelines.enrich]


@pytest.mark.parametrize("as_path", [str, Path])
def test_load_from_file_path(as_path: type[str] | type[Path]) -> None:
    pipelines = load_pipelines(as_path(SAMPLE_FILE))
    assert [p.name for p in pipelines] == ["clicks-per-user", "enrich"]
    # A fresh module, not the one imported above: its pipelines are distinct objects.
    assert pipelines[0] is not sample_pipelines.clicks_per_user
    graph = pipelines[0].compile()
    assert graph.functions["1-source"].value_model is not None
    assert graph.functions["1-source"].value_model.__module__ == "_cadenza_user_sample_pipelines"
    assert graph.sink_topics == ["clicks-per-user"]


def test_file_may_import_its_siblings(tmp_path: Path) -> None:
    (tmp_path / "shared_names_for_test.py").write_text('TOPIC = "from-sibling"\n')
    module = tmp_path / "pipes.py"
    module.write_text(
        "from cadenza.pipelines import Pipeline\n"
        "from shared_names_for_test import TOPIC\n"
        "p = Pipeline('sib', 't', '1s')\n"
        "p.source(TOPIC).sink('out')\n"
    )
    try:
        (pipeline,) = load_pipelines(module)
    finally:
        sys.modules.pop("shared_names_for_test", None)
    assert pipeline.compile().source_topics == ["from-sibling"]
    assert str(tmp_path) not in sys.path


def test_module_without_pipelines() -> None:
    message = (
        "module 'tests.pipelines.test_describe' declares no pipeline; bind a Pipeline(...) to a "
        "module-level name"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        load_pipelines("tests.pipelines.test_describe")


def test_missing_module_and_file() -> None:
    message = (
        "cannot import module 'tests.pipelines.nope': ModuleNotFoundError: No module named "
        "'tests.pipelines.nope'"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        load_pipelines("tests.pipelines.nope")
    with pytest.raises(
        PipelineDefinitionError, match=r"^cannot import module '.*missing\.py': no such file$"
    ):
        load_pipelines("does/not/exist/missing.py")


def test_import_errors_name_the_module(tmp_path: Path) -> None:
    module = tmp_path / "broken.py"
    module.write_text("from cadenza.pipelines import Pipeline\np = Pipeline('p', 't', 'soon')\n")
    message = (
        f"cannot import module {str(module)!r}: PipelineDefinitionError: pipeline 'p': latency target: "
        "cannot parse 'soon'; write a number and a unit, e.g. '250ms', '1.5s', '2m' "
        "(units: us, ms, s, m, min, h)"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        load_pipelines(module)
    assert "_cadenza_user_broken" not in sys.modules


def test_duplicate_pipeline_names(tmp_path: Path) -> None:
    module = tmp_path / "twice.py"
    module.write_text(
        "from cadenza.pipelines import Pipeline\n"
        "a = Pipeline('same', 't', '1s')\n"
        "b = Pipeline('same', 'u', '2s')\n"
    )
    message = (
        f"pipeline 'same': module {str(module)!r} declares two pipelines named 'same'; names must be unique "
        "because they prefix the internal topics"
    )
    with pytest.raises(PipelineDefinitionError, match=f"^{re.escape(message)}$"):
        load_pipelines(module)


def test_only_module_level_pipelines_count(tmp_path: Path) -> None:
    module = tmp_path / "nested.py"
    module.write_text(
        "from cadenza.pipelines import Pipeline\n"
        "def factory() -> Pipeline:\n"
        "    return Pipeline('inner', 't', '1s')\n"
        "PIPELINES = [Pipeline('in-a-list', 't', '1s')]\n"
    )
    with pytest.raises(PipelineDefinitionError, match="declares no pipeline"):
        load_pipelines(module)
