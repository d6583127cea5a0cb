"""Reading a node's `/metrics` as Prometheus would: the library's own text parser."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.support import Api

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrape:
    """Every sample of one exposition, by sample name and labels."""

    samples: dict[str, dict[Labels, float]]
    types: dict[str, str]
    text: str = ""
    """The exposition as served."""

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0: none)."""
        wanted = set(labels.items())
        return sum(v for key, v in self.samples.get(name, {}).items() if wanted <= set(key))

    def series(self, name: str) -> list[dict[str, str]]:
        return [dict(key) for key in self.samples.get(name, {})]

    def check_histogram(self, name: str) -> None:
        """Every series of histogram `name`: cumulative buckets, +Inf equal to the count."""
        by_series: dict[Labels, list[tuple[float, float]]] = {}
        for key, count in self.samples.get(f"{name}_bucket", {}).items():
            labels = dict(key)
            bound = float(labels.pop("le"))
            by_series.setdefault(tuple(sorted(labels.items())), []).append((bound, count))
        assert by_series, f"{name} has no buckets"
        for series, buckets in by_series.items():
            buckets.sort()
            counts = [count for _, count in buckets]
            assert counts == sorted(counts), f"{name}{series}: buckets not cumulative: {buckets}"
            assert math.isinf(buckets[-1][0])
            assert counts[-1] == self.samples[f"{name}_count"][series], f"{name}{series}: +Inf is not the count"
            assert len(buckets) >= 8, f"{name}: too few buckets to say anything"
            assert self.samples[f"{name}_sum"][series] >= 0, f"{name}{series}: negative sum"

    def check_histograms(self) -> list[str]:
        """`check_histogram` for every histogram family with samples; returns their names."""
        checked = [name for name, kind in self.types.items() if kind == "histogram" and self.samples.get(f"{name}_bucket")]
        for name in checked:
            self.check_histogram(name)
        return checked


async def scrape(api: Api) -> Scrape:
    port = api.platform.settings.metrics_port
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[Labels, float]] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(response.text):
        types[family.name] = family.type
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return Scrape(samples, types, response.text)


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    """How far the samples of `name` with `labels` went from `before` to `after`."""
    return after.value(name, **labels) - before.value(name, **labels)


async def scrape_until(api: Api, done: Callable[[Scrape], bool], timeout: float = 20.0) -> Scrape:
    """Scrape until `done` holds (figures counted just after an answer), or fail after `timeout`."""
    with trio.fail_after(timeout):
        while not done(found := await scrape(api)):
            await trio.sleep(0.05)
    return found
