"""The dashboard's history charts in Chromium: the x-axis spans the chosen range in the labelled time zone,
a single sample is drawn, and an empty range says when data will appear."""

import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduler.history import record_sample
from scheduler.selectors import cluster_sample

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def occupancy(page):
    page.wait_for_function("document.querySelector('#plot-occupancy .main-svg') !== null")
    return page.evaluate("""() => {
        const plot = document.getElementById('plot-occupancy');
        return {range: plot.layout.xaxis.range,
                modes: plot.data.map(t => t.mode), points: plot.data[0].x.length,
                notes: (plot.layout.annotations || []).map(a => a.text),
                ticks: Array.from(plot.querySelectorAll('.xtick text')).map(t => t.textContent)};
    }""")


def span_minutes(chart) -> float:
    start, end = (datetime.fromisoformat(value.replace(" ", "T")) for value in chart["range"])
    return (end - start).total_seconds() / 60


def test_an_empty_range_says_when_data_will_appear_and_spans_the_range(demo, visit, settings):
    settings.TIME_ZONE = "Europe/Berlin"
    visit.login("pat")
    visit.goto("/clusters/gb200-east/?range=1h")
    page = visit.page
    chart = occupancy(page)
    assert chart["points"] == 0
    assert re.fullmatch(r"No samples in this range yet\.<br>The first appears by \d\d:\d\d Europe/Berlin"
                        r"<br>\(one every 1 min\)\.", chart["notes"][0]), chart["notes"]
    assert round(span_minutes(chart)) == 60
    assert re.fullmatch(r"updated \d\d:\d\d:\d\d Europe/Berlin · 0 points", page.get_by_test_id("updated").inner_text())
    # The range's end is now, in the zone the top bar names.
    local_now = timezone.localtime(timezone.now(), timezone=__import__("zoneinfo").ZoneInfo("Europe/Berlin"))
    assert chart["range"][1][:13] == local_now.strftime("%Y-%m-%d %H")
    assert page.get_by_test_id("time-zone").inner_text() == "times in Europe/Berlin"
    visit.shot("dashboard-empty-range")
    assert visit.console_errors == []


def test_a_single_sample_is_drawn_on_an_axis_of_the_whole_range(demo, visit):
    record_sample(demo, now=timezone.now() - timedelta(minutes=2), sample=cluster_sample(demo))
    visit.login("pat")
    visit.goto("/clusters/gb200-east/?range=6h")
    chart = occupancy(visit.page)
    assert chart["points"] == 1 and chart["notes"] == []
    assert all(mode == "lines+markers" for mode in chart["modes"])
    assert round(span_minutes(chart)) == 360
    assert chart["ticks"] and not any(re.search(r"\d\d:\d\d:\d\d\.\d", tick) for tick in chart["ticks"])
    visit.shot("dashboard-one-sample")
    assert visit.console_errors == []
