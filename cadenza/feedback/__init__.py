"""Learned costs: the statistics that turn measured spans into the cost model's estimates.

- :mod:`~cadenza.feedback.stats_job` (with :mod:`~cadenza.feedback.stats_decode`): the Spark job
  (``cadenza stats``) that reads the metrics topic's spans and publishes per-operator statistics;
- :mod:`~cadenza.feedback.records`: those statistics and the other records of the feedback topic
  (``feedback.avsc``, told apart by their kind header);
- :mod:`~cadenza.feedback.consumer`: a worker's reader of the feedback topic, folding the statistics
  into its :class:`~cadenza.scheduling.costs.CostModel`.

The Spark job's module needs the ``spark`` extra and is imported from its own module only.
"""
