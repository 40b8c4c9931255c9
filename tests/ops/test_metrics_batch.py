"""core.metrics' batched writes ("Batched writes" in its docstring): what a flush writes is what
prometheus-client's own calls would have written (the layout of its children is read, so a new
version that changes it fails here), the flusher thread, and the interval 0 (at once).
The scrapes of several workers, and a worker writing its batch when it stops, are in
tests/ops/test_metrics.py."""

from __future__ import annotations

import math
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from core import metrics

BUCKETS = (0.001, 0.01, 0.1, 1.0)
# On a bound, between bounds, below the first, above the last, zero, negative, +Inf and NaN.
OBSERVED = [0.001, 0.01, 1.0, 0.0005, 0.05, 2.5, 0.0, -1.0, math.inf, math.nan, 0.1, 0.1]


def samples(registry: CollectorRegistry) -> dict:
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a
    )


def metric_set():
    registry = CollectorRegistry()
    histogram = Histogram("h", "h", ["a"], buckets=BUCKETS, registry=registry)
    counter = Counter("c", "c", ["a"], registry=registry)
    gauge = Gauge("g", "g", ["a"], registry=registry)
    return registry, histogram.labels("x"), counter.labels("x"), gauge.labels("x")


def test_a_flush_writes_what_prometheus_client_s_own_calls_write():
    direct, histogram, counter, gauge = metric_set()
    for amount in OBSERVED:
        histogram.observe(amount)
    counter.inc(3)
    counter.inc(0.5)
    gauge.set(7)
    gauge.set(5)

    batched, histogram, counter, gauge = metric_set()
    observed = metrics._Observed(histogram)
    value = metrics._counted(counter)
    with metrics._lock:
        for amount in OBSERVED:
            observed.add(metrics._adds, amount)
        for amount in (3, 0.5):
            metrics._adds[value] = metrics._adds.get(value, 0.0) + amount
        metrics._sets[gauge] = 7
        metrics._sets[gauge] = 5
    assert samples(batched)[("c_total", (("a", "x"),))] == 0  # nothing written yet
    metrics.flush()
    assert same(samples(batched), samples(direct)), (samples(batched), samples(direct))
    metrics.flush()  # an empty batch writes nothing more
    assert same(samples(batched), samples(direct))


def test_the_recorders_write_nothing_until_the_flush(monkeypatch):
    monkeypatch.setattr(metrics, "ENABLED", True)
    status = metrics._counted(metrics.HTTP_RESPONSES.labels("599"))
    before = status.get()
    metrics.http_response(599)
    metrics.http_response(599)
    assert status.get() == before
    metrics.flush()
    assert status.get() == before + 2


def test_an_interval_of_0_writes_at_once(monkeypatch):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.setattr(metrics, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(metrics, "_flusher", None)
    status = metrics._counted(metrics.HTTP_RESPONSES.labels("598"))
    before = status.get()
    metrics.http_response(598)
    assert status.get() == before + 1
    assert metrics._flusher is None  # no thread


def test_one_flusher_thread_writes_every_interval(monkeypatch):
    monkeypatch.setattr(metrics, "ENABLED", True)
    monkeypatch.setattr(metrics, "FLUSH_SECONDS", 0.01)
    monkeypatch.setattr(metrics, "_flusher", None)
    status = metrics._counted(metrics.HTTP_RESPONSES.labels("597"))
    before = status.get()
    metrics.http_response(597)
    metrics.http_response(597)
    flusher = metrics._flusher
    assert flusher is not None and flusher.daemon and flusher.name == "metrics-flush"
    assert sum(t is flusher for t in threading.enumerate()) == 1
    deadline = time.monotonic() + 10  # a bound: the thread writes within 0.01 s
    while status.get() != before + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert status.get() == before + 2


def test_a_forked_child_starts_with_an_empty_batch_and_no_flusher(monkeypatch):
    for name in ("_lock", "_adds", "_sets", "_flusher"):
        monkeypatch.setattr(metrics, name, getattr(metrics, name))
    held = threading.Lock()
    held.acquire()  # as if another thread of the parent held it at the fork
    monkeypatch.setattr(metrics, "_lock", held)
    monkeypatch.setattr(metrics, "_adds", {object(): 1.0})
    monkeypatch.setattr(metrics, "_flusher", threading.current_thread())
    metrics._forked()
    assert metrics._adds == {} and metrics._sets == {} and metrics._flusher is None
    assert metrics._lock is not held and metrics._lock.acquire(blocking=False)
    metrics._lock.release()


@pytest.mark.parametrize("value", [math.nan, -0.0, 1e308])
def test_odd_timings_are_written_as_prometheus_client_writes_them(value):
    direct, histogram, _, _ = metric_set()
    histogram.observe(value)
    batched, histogram, _, _ = metric_set()
    with metrics._lock:
        metrics._Observed(histogram).add(metrics._adds, value)
    metrics.flush()
    assert same(samples(batched), samples(direct))
