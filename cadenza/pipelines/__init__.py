"""Declaring pipelines: the DSL users write, and the graph workers, the scheduler and the CLI read.

Pure logic: nothing here talks to Kafka or runs a record. ``Pipeline(...).source(...)...sink(...)``
declares, ``Pipeline.compile()`` validates and returns a :class:`PipelineGraph`, ``load_pipelines``
finds the pipelines of a user module and ``describe`` renders graphs for ``cadenza describe``.
"""

from __future__ import annotations

from cadenza.pipelines.describe import describe
from cadenza.pipelines.errors import PipelineDefinitionError
from cadenza.pipelines.graph import (
    EdgeSpec,
    InternalTopic,
    NodeFunctions,
    NodeSpec,
    PipelineGraph,
    SparkStageFunctions,
    SparkStageSpec,
)
from cadenza.pipelines.pipeline import Pipeline
from cadenza.pipelines.registry import load_pipelines
from cadenza.pipelines.stream import Stream, WindowedStream
from cadenza.pipelines.windows import WINDOW_SPEC_ADAPTER, Hopping, Session, Sliding, Tumbling, WindowSpec

__all__ = [
    "WINDOW_SPEC_ADAPTER",
    "EdgeSpec",
    "Hopping",
    "InternalTopic",
    "NodeFunctions",
    "NodeSpec",
    "Pipeline",
    "PipelineDefinitionError",
    "PipelineGraph",
    "Session",
    "Sliding",
    "SparkStageFunctions",
    "SparkStageSpec",
    "Stream",
    "Tumbling",
    "WindowSpec",
    "WindowedStream",
    "describe",
    "load_pipelines",
]
