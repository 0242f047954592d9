"""Reading recorded metrics back in process (the demo's closing figures, the tests)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

Points = dict[str, list[tuple[dict[str, Any], float]]]


def metric_points(reader: InMemoryMetricReader) -> Points:
    """Metric name -> [(attributes, value)]; a histogram's value is its sum."""
    out: Points = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    value = point.value if isinstance(point, NumberDataPoint) else point.sum
                    attributes = dict(point.attributes or {})
                    out.setdefault(metric.name, []).append((attributes, value))
    return out


def total(points: Points, name: str, **attrs: Any) -> float:
    """The sum of ``name`` over the points whose attributes include ``attrs``."""
    return sum(v for a, v in points.get(name, []) if all(a.get(k) == w for k, w in attrs.items()))
