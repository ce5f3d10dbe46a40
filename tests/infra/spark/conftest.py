"""The Spark adapter's tests: which of them need PySpark (the shared session is tests/conftest.py's)."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("pyspark") is None:
    # Without the `spark` extra only the Java and install checks can run (they need no PySpark).
    collect_ignore_glob = [
        "test_format.py",
        "test_kafka_sink.py",
        "test_kafka_source.py",
        "test_options.py",
        "test_options_in_spark.py",
        "test_read_range.py",
        "test_sink_columns.py",
    ]
