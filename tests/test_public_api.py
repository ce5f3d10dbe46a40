"""The names a user imports from ``cadenza`` exist and are the objects the sub-packages define."""

import cadenza
from cadenza.pipelines import Pipeline
from cadenza.worker import Worker


def test_every_exported_name_resolves() -> None:
    missing = [name for name in cadenza.__all__ if not hasattr(cadenza, name)]
    assert missing == []


def test_exports_are_the_real_objects() -> None:
    assert cadenza.Pipeline is Pipeline
    assert cadenza.Worker is Worker
    assert cadenza.get_policy("cameo").name == "cameo"
