"""Measured inputs and process settings that tune a running worker: the collector's thresholds, the
true rates published for scaling, and the repartition hops' latency estimates."""
