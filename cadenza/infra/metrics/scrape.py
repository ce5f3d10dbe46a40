"""Reading a worker's ``/metrics``: the one parser of its exposition and the extraction its readers share.

The pool (:mod:`cadenza.scaling.observe`), the dashboard (:mod:`cadenza.dashboard.scrape`) and the
demo (:mod:`cadenza.demo.worker_metrics`) each want different numbers from the same text; they all
parse it here with ``prometheus_client.parser`` (the reference parser) and pick series out with these
primitives: samples of one name keyed by some of their labels, those summed over the other labels,
counter growth between two scrapes, and histogram buckets (whose quantiles are
:mod:`cadenza.infra.metrics.quantiles`').

An *exposition* is either the text of a scrape or the samples :func:`parse` made of it, so a reader
that asks several questions of one scrape parses it once.
"""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterable, Sequence

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from cadenza.infra.metrics.quantiles import Buckets

__all__ = [
    "Exposition",
    "ExpositionError",
    "Key",
    "Sample",
    "add_bucket",
    "bucket_sums",
    "counter_deltas",
    "fetch",
    "label_key",
    "metrics_url",
    "parse",
    "sample_sums",
    "sample_values",
]

Exposition = str | Sequence[Sample]
"""The text of one scrape, or its samples (:func:`parse`)."""
Key = tuple[str, ...]
"""The values of the labels a series is keyed by, in the order they were asked for."""


class ExpositionError(ValueError):
    """Text that is not a Prometheus exposition (the parser's own message)."""


def parse(text: str) -> list[Sample]:
    """Every sample of every family in ``text``; :class:`ExpositionError` if the parser rejects it."""
    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(str(exc)) from exc


def _samples(exposition: Exposition) -> Sequence[Sample]:
    return parse(exposition) if isinstance(exposition, str) else exposition


def metrics_url(url: str) -> str:
    """``host:port`` or ``http://host:port`` means the worker's ``/metrics``; a full path is kept."""
    if "://" not in url:
        url = f"http://{url}"
    _, _, path = url.partition("://")[2].partition("/")
    return url if path else f"{url.rstrip('/')}/metrics"


def fetch(url: str, timeout: float) -> str:
    """The text at ``url`` (see :func:`metrics_url`); the ``urllib`` error (an ``OSError``) if it
    does not answer."""
    with urllib.request.urlopen(metrics_url(url), timeout=timeout) as response:
        text: str = response.read().decode("utf-8", errors="replace")
        return text


def label_key(sample: Sample, labels: Sequence[str]) -> Key | None:
    """The values of ``labels`` on ``sample``, or None if it lacks one of them."""
    try:
        return tuple(sample.labels[label] for label in labels)
    except KeyError:
        return None


def _keyed(exposition: Exposition, name: str, labels: Sequence[str]) -> Iterable[tuple[Key, float]]:
    for sample in _samples(exposition):
        if sample.name == name:
            key = label_key(sample, labels)
            if key is not None:
                yield key, float(sample.value)


def sample_values(exposition: Exposition, name: str, labels: Sequence[str]) -> dict[Key, float]:
    """Each series of sample ``name`` keyed by the values of ``labels`` (where several series share a
    key, the last one is kept: ``labels`` should name them all)."""
    return dict(_keyed(exposition, name, labels))


def sample_sums(exposition: Exposition, name: str, labels: Sequence[str]) -> dict[Key, float]:
    """The series of sample ``name`` summed over every label but ``labels`` (e.g. over operators)."""
    sums: dict[Key, float] = {}
    for key, value in _keyed(exposition, name, labels):
        sums[key] = sums.get(key, 0.0) + value
    return sums


def counter_deltas(
    before: Exposition, after: Exposition, name: str, labels: Sequence[str]
) -> dict[Key, float]:
    """How much each series of counter sample ``name`` (keyed by the values of ``labels``) grew between
    two scrapes; series that did not grow are left out."""
    start = sample_values(before, name, labels)
    grown = {key: value - start.get(key, 0.0) for key, value in sample_values(after, name, labels).items()}
    return {key: delta for key, delta in grown.items() if delta > 0}


def add_bucket(buckets: Buckets, sample: Sample) -> None:
    """Add a histogram ``_bucket`` sample's cumulative count at its upper bound (``le``); a sample
    without a bound is ignored."""
    bound = float(sample.labels.get("le", "nan"))
    if not math.isnan(bound):
        buckets[bound] = buckets.get(bound, 0.0) + float(sample.value)


def bucket_sums(exposition: Exposition, histogram: str, labels: Sequence[str]) -> dict[Key, Buckets]:
    """Per value of ``labels``, the cumulative bucket counts of ``histogram`` (its name without
    ``_bucket``) summed over every other label."""
    buckets: dict[Key, Buckets] = {}
    for sample in _samples(exposition):
        if sample.name == f"{histogram}_bucket":
            key = label_key(sample, labels)
            if key is not None:
                add_bucket(buckets.setdefault(key, {}), sample)
    return buckets
