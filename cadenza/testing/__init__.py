"""Test support for cadenza users and for cadenza's own suite.

:class:`PipelineDriver` runs pipelines in-process with no broker, on a virtual clock (like Kafka
Streams' ``TopologyTestDriver``). For tests through a real broker, use the pytest plugin from a
``conftest.py`` with ``pytest_plugins = ["cadenza.testing.pytest_plugin"]``.
"""

from cadenza.testing.brokers import TestBroker, planned_broker_kind, provide_test_broker
from cadenza.testing.driver import OutputRecord, PipelineDriver

__all__ = ["OutputRecord", "PipelineDriver", "TestBroker", "planned_broker_kind", "provide_test_broker"]
