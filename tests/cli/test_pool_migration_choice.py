"""``cadenza pool --migration``: what ``auto`` resolves to, and the choices refused."""

from __future__ import annotations

import pytest
import typer
from pydantic import BaseModel

from cadenza.cli.pool import resolve_migration
from cadenza.pipelines import Pipeline


class Row(BaseModel):
    key: str
    ts: float


def test_auto_migration_is_fluid_unless_a_join_or_workers_run_elsewhere() -> None:
    plain = Pipeline("plain", tenant="t", latency_target="1s")
    plain.source("in", value=Row).map(lambda r: r).sink("out")
    joined = Pipeline("joined", tenant="t", latency_target="1s")
    right = joined.source("r", value=Row, key=str)
    joined.source("l", value=Row, key=str).join(right, "1s").sink("out")
    graphs, with_join = [plain.compile()], [plain.compile(), joined.compile()]
    assert resolve_migration("auto", graphs, own_workers=True) == "fluid"
    assert resolve_migration("auto", with_join, own_workers=True) == "group"
    assert resolve_migration("auto", graphs, own_workers=False) == "group"
    assert resolve_migration("matching", graphs, own_workers=True) == "matching"
    with pytest.raises(typer.BadParameter, match="needs the pool's own workers"):
        resolve_migration("fluid", graphs, own_workers=False)
    with pytest.raises(typer.BadParameter, match="must be auto, group"):
        resolve_migration("teleport", graphs, own_workers=True)
