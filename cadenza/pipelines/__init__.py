"""Declaring pipelines: the DSL users write, and the graph workers, the scheduler and the CLI read.

Pure logic: nothing here talks to Kafka or runs a record. ``Pipeline(...).source(...)...sink(...)``
declares, ``Pipeline.compile()`` validates and returns a :class:`PipelineGraph`, ``load_pipelines``
finds the pipelines of a user module and ``describe`` renders graphs for ``cadenza describe``.
"""

from __future__ import annotations

from cadenza.pipelines.describe import describe
from cadenza.pipelines.errors import PipelineDefinitionError
from cadenza.pipelines.graph import PipelineGraph
from cadenza.pipelines.pipeline import Pipeline
from cadenza.pipelines.processor import Processor, ProcessorContext, ProcessorRecord
from cadenza.pipelines.registry import load_pipelines
from cadenza.pipelines.stream import Stream, WindowedStream
from cadenza.pipelines.window_specs import Hopping, Session, Sliding, Tumbling

# What users write and read: the DSL, the windows, the compiled graph `Pipeline.compile()` returns,
# loading and describing. The graph's parts (NodeSpec, EdgeSpec, ...) and the window adapter are for
# the worker and the CLI, which import them from their modules.
__all__ = [
    "Hopping",
    "Pipeline",
    "PipelineDefinitionError",
    "PipelineGraph",
    "Processor",
    "ProcessorContext",
    "ProcessorRecord",
    "Session",
    "Sliding",
    "Stream",
    "Tumbling",
    "WindowedStream",
    "describe",
    "load_pipelines",
]
