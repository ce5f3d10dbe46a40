"""cadenza: Kafka-native stream processing for Python that meets deadlines.

The public API lives here; everything in sub-packages not re-exported below is internal.
"""

from cadenza.errors import CadenzaError, ConfigError
from cadenza.settings import KafkaSettings

__version__ = "0.1.0"

__all__ = ["CadenzaError", "ConfigError", "KafkaSettings", "__version__"]
