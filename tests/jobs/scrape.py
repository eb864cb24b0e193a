"""A `/metrics` scrape parsed, and the sum of the samples of a name whose labels match
(`Scrape`).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    def __init__(self, text: str) -> None:
        self.families = {family.name: family for family in text_string_to_metric_families(text)}

    def value(self, sample: str, **labels: str) -> float:
        """The sum of the samples of that name whose labels include `labels` (0 if none)."""
        family = self.families[sample.removesuffix("_total").removesuffix("_count")]
        return sum(
            s.value
            for s in family.samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def labels_of(self, family: str) -> set[str]:
        found: set[str] = set()
        for sample in self.families[family].samples:
            found |= set(sample.labels) - {"le"}
        return found
