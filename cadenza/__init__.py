"""cadenza: Kafka-native stream processing for Python that meets deadlines.

The public API lives here; everything in sub-packages not re-exported below is internal and may
change without notice.
"""

from cadenza.errors import CadenzaError, ConfigError
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
from cadenza.scheduling import SchedulingPolicy, get_policy
from cadenza.settings import KafkaSettings
from cadenza.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "CadenzaError",
    "ConfigError",
    "Hopping",
    "KafkaSettings",
    "Pipeline",
    "PipelineDefinitionError",
    "SchedulingPolicy",
    "Session",
    "Sliding",
    "Stream",
    "Tumbling",
    "WindowedStream",
    "Worker",
    "__version__",
    "describe",
    "get_policy",
    "load_pipelines",
]
