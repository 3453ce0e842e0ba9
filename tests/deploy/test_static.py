"""The pages' Plotly is the cartesian bundle, and it draws every chart the pages ask for."""

import re
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders

from config.csp import plotly_style_hashes

ROOT = Path(settings.BASE_DIR)
# Axis and shape types share the `type:` key with traces; they are not traces.
NOT_TRACES = {"date", "category", "linear", "log", "multicategory", "line", "rect", "circle", "path"}


def bundle() -> str:
    return Path(finders.find("plotly/plotly.min.js")).read_text(encoding="utf-8")


def test_the_pages_get_the_cartesian_bundle():
    source = bundle()
    assert source.startswith("/**\n* plotly.js (cartesian - minified) v")
    assert len(source) < 2_000_000  # the full bundle is 4.8 MB


def test_every_chart_on_every_page_is_a_trace_the_bundle_has():
    source = bundle()
    traces = set(re.findall(r'moduleType:"trace",name:"(\w+)"', source))
    assert {"scatter", "bar"} <= traces
    scripts = [*ROOT.glob("static/js/*.js"), *ROOT.glob("templates/**/*.html")]
    used, calls = set(), set()
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        used |= set(re.findall(r'\btype:\s*"(\w+)"', text)) - NOT_TRACES
        calls |= set(re.findall(r"\bPlotly\.(\w+)", text))
    assert used, "no chart found: the pattern no longer matches the page scripts"
    assert used <= traces, f"pages draw {sorted(used - traces)}, which the cartesian bundle lacks"
    for call in calls:
        assert re.search(rf"\b{call}:", source) or f".{call}=" in source, f"Plotly.{call} is not in the bundle"


def test_the_content_security_policy_allows_the_bundles_own_styles():
    hashes = plotly_style_hashes(Path(finders.find("plotly/plotly.min.js")))
    assert len(hashes) >= 2  # the empty <style> and the bundle's own stylesheet
    for value in hashes[1:]:
        assert value in settings.CONTENT_SECURITY_POLICY
