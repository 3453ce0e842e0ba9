"""Usage ratios are written one way everywhere: the core's reasons, the queue and dashboard, the budget pages."""

import math

import pytest

from scheduler.core.reasons import format_percent, format_ratio
from scheduler.templatetags.allot import ratio as page_ratio


@pytest.mark.parametrize("value, text", [
    (0, "0 %"), (0.0004, "0.04 %"), (0.015, "1.5 %"), (0.035, "3.5 %"), (0.4237, "42 %"), (1.5, "150 %"),
    (math.inf, "∞ %"),
])
def test_a_ratio_reads_the_same_in_a_reason_on_the_queue_and_on_the_budget_pages(value, text):
    assert format_percent(value) == format_ratio(value) == page_ratio(value) == text


def test_small_ratios_stay_apart():
    assert len({format_percent(value) for value in (0.001, 0.004, 0.012, 0.018, 0.05, 0.09)}) == 6


def test_one_ratio_filter_and_every_template_that_writes_a_ratio_loads_it():
    import re
    from pathlib import Path

    from budgets.templatetags import budget_tags
    from scheduler.templatetags import allot

    assert "ratio" in allot.register.filters and "ratio" not in budget_tags.register.filters
    templates = Path(__file__).resolve().parents[2] / "templates"
    writing = [path for path in templates.rglob("*.html") if re.search(r"\|ratio\b(?!_)", path.read_text())]
    assert writing
    for path in writing:
        loads = re.findall(r"{% load ([^%]+) %}", path.read_text())
        assert any("allot" in load.split() for load in loads), path
