"""cadenza: Kafka-native stream processing for Python that meets deadlines.

The public API lives here; everything in sub-packages not re-exported below is internal and may
change without notice.

The names are resolved on first use (module ``__getattr__``), so ``import cadenza`` to declare
pipelines loads no Kafka client, Prometheus or Spark module: those come with the first use of
``Worker``, ``PrometheusExporter`` or ``KafkaSettings``. Type checkers and IDEs see the imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cadenza.errors import CadenzaError, ConfigError
    from cadenza.infra.metrics import PrometheusExporter
    from cadenza.pipelines import (
        Hopping,
        Pipeline,
        PipelineDefinitionError,
        Processor,
        ProcessorContext,
        ProcessorRecord,
        Session,
        Sliding,
        Stream,
        Tumbling,
        WindowedStream,
        describe,
        load_pipelines,
    )
    from cadenza.scheduling import (
        BasePolicy,
        Measurement,
        OperatorInfo,
        Reply,
        SchedulingContext,
        SchedulingPolicy,
        SourceRecordInfo,
        VirtualClock,
        get_policy,
    )
    from cadenza.schemas import AvroFormat, Codec, JsonFormat
    from cadenza.settings import KafkaSettings
    from cadenza.worker import ProcessConfig, Worker, WorkerConfig, WorkerParts

__version__ = "0.1.0"

#: Public name -> the module that defines it (imported when the name is first read).
_EXPORTS: dict[str, str] = {
    "CadenzaError": "cadenza.errors",
    "ConfigError": "cadenza.errors",
    "PrometheusExporter": "cadenza.infra.metrics",
    "Hopping": "cadenza.pipelines",
    "Pipeline": "cadenza.pipelines",
    "PipelineDefinitionError": "cadenza.pipelines",
    "Processor": "cadenza.pipelines",
    "ProcessorContext": "cadenza.pipelines",
    "ProcessorRecord": "cadenza.pipelines",
    "Session": "cadenza.pipelines",
    "Sliding": "cadenza.pipelines",
    "Stream": "cadenza.pipelines",
    "Tumbling": "cadenza.pipelines",
    "WindowedStream": "cadenza.pipelines",
    "describe": "cadenza.pipelines",
    "load_pipelines": "cadenza.pipelines",
    "BasePolicy": "cadenza.scheduling",
    "Measurement": "cadenza.scheduling",
    "OperatorInfo": "cadenza.scheduling",
    "Reply": "cadenza.scheduling",
    "SchedulingContext": "cadenza.scheduling",
    "SchedulingPolicy": "cadenza.scheduling",
    "SourceRecordInfo": "cadenza.scheduling",
    "VirtualClock": "cadenza.scheduling",
    "get_policy": "cadenza.scheduling",
    "AvroFormat": "cadenza.schemas",
    "Codec": "cadenza.schemas",
    "JsonFormat": "cadenza.schemas",
    "KafkaSettings": "cadenza.settings",
    "ProcessConfig": "cadenza.worker",
    "Worker": "cadenza.worker",
    "WorkerConfig": "cadenza.worker",
    "WorkerParts": "cadenza.worker",
}

__all__ = [
    "AvroFormat",
    "BasePolicy",
    "CadenzaError",
    "Codec",
    "ConfigError",
    "Hopping",
    "JsonFormat",
    "KafkaSettings",
    "Measurement",
    "OperatorInfo",
    "Pipeline",
    "PipelineDefinitionError",
    "ProcessConfig",
    "Processor",
    "ProcessorContext",
    "ProcessorRecord",
    "PrometheusExporter",
    "Reply",
    "SchedulingContext",
    "SchedulingPolicy",
    "Session",
    "Sliding",
    "SourceRecordInfo",
    "Stream",
    "Tumbling",
    "VirtualClock",
    "WindowedStream",
    "Worker",
    "WorkerConfig",
    "WorkerParts",
    "__version__",
    "describe",
    "get_policy",
    "load_pipelines",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
