"""cadenza: Kafka-native stream processing for Python that meets deadlines.

The public API lives here; everything in sub-packages not re-exported below is internal and may
change without notice.
"""

from cadenza.errors import CadenzaError, ConfigError
from cadenza.infra.metrics import PrometheusExporter
from cadenza.pipelines import (
    Hopping,
    Pipeline,
    PipelineDefinitionError,
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
from cadenza.worker import Worker

__version__ = "0.1.0"

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
    "__version__",
    "describe",
    "get_policy",
    "load_pipelines",
]
