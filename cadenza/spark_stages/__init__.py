"""A pipeline's ``on_spark`` stages, run as Structured Streaming queries (``cadenza spark-stage``).

:mod:`~cadenza.spark_stages.runner` needs the ``spark`` extra and is imported from its own module.
"""
