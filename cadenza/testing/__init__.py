"""Test support for cadenza users and for cadenza's own suite: a real broker for every test run.

Use it from a ``conftest.py`` with ``pytest_plugins = ["cadenza.testing.pytest_plugin"]``.
"""

from cadenza.testing.brokers import TestBroker, planned_broker_kind, provide_test_broker

__all__ = ["TestBroker", "planned_broker_kind", "provide_test_broker"]
