"""Usage ratios are written one way everywhere: the core's reasons, the queue and dashboard, the budget pages."""

import math

import pytest

from budgets.templatetags.budget_tags import ratio as budget_ratio
from scheduler.core.reasons import format_percent, format_ratio
from scheduler.selectors import format_percent as page_percent


@pytest.mark.parametrize("value, text", [
    (0, "0 %"), (0.0004, "0.04 %"), (0.015, "1.5 %"), (0.035, "3.5 %"), (0.4237, "42 %"), (1.5, "150 %"),
    (math.inf, "∞ %"),
])
def test_a_ratio_reads_the_same_in_a_reason_on_the_queue_and_on_the_budget_pages(value, text):
    assert format_percent(value) == format_ratio(value) == page_percent(value) == budget_ratio(value) == text


def test_small_ratios_stay_apart():
    assert len({format_percent(value) for value in (0.001, 0.004, 0.012, 0.018, 0.05, 0.09)}) == 6
