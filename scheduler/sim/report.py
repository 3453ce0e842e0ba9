"""report.html: a run's plots, with plotly.js inline so the file opens offline.

Occupancy over time by kind, usage against entitlement per project, waits by
class and fragmentation (stranded(k)) over time, what preemptions cost
(goodput per project, wasted preemptions, preemptions per job, lost work with
the restart overhead), plus the summary's figures.
Deterministic: fixed element ids, no timestamps.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from .measures import CLASSES
from .output import waits

PALETTE = {"allocated": "#1f77b4", "unallocated": "#7fb3d5", "idle": "#d9d9d9", "unavailable": "#e07b39"}


def _figure(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(template="plotly_white", height=420, margin={"l": 60, "r": 20, "t": 50, "b": 50})
    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def occupancy_figure(series: dict, total_gpus: int) -> go.Figure:
    days = [h / 24 for h in series["hours"]]
    up = series["up"]
    unavailable = [max(0.0, total_gpus - a - u - i) for a, u, i in
                   zip(series["allocated"], series["unallocated"], series["idle"], strict=True)]
    del up
    fig = go.Figure()
    for name, values in (("allocated", series["allocated"]), ("unallocated", series["unallocated"]),
                         ("idle", series["idle"]), ("unavailable", unavailable)):
        fig.add_trace(go.Scatter(x=days, y=values, name=name, stackgroup="gpus", mode="none",
                                 fillcolor=PALETTE[name]))
    fig.add_trace(go.Scatter(x=days, y=series["demand"], name="demand (GPUs asked)", mode="lines",
                             line={"color": "#333", "dash": "dot"}))
    fig.update_layout(title="GPUs by state, hourly averages", xaxis_title="day", yaxis_title="GPUs")
    return fig


def usage_figure(series: dict, owed: dict) -> go.Figure:
    days = [h / 24 for h in series["hours"]]
    fig = go.Figure()
    for project, values in series["projects"].items():
        fig.add_trace(go.Scatter(x=days, y=values["used"], name=f"{project} used", mode="lines",
                                 legendgroup=project))
        if any(values["entitled"]):
            fig.add_trace(go.Scatter(x=days, y=values["entitled"], name=f"{project} entitled", mode="lines",
                                     line={"dash": "dash", "width": 1}, legendgroup=project, showlegend=False))
    fig.update_layout(title="Allocated GPUs used per project (dashed: entitlement), hourly averages",
                      xaxis_title="day", yaxis_title="GPUs")
    return fig


def delivered_figure(owed: dict) -> go.Figure:
    projects = sorted(owed["gpu_hours"])
    fig = go.Figure()
    fig.add_trace(go.Bar(x=projects, y=[owed["gpu_hours"][p]["owed_gpu_hours"] for p in projects], name="owed"))
    fig.add_trace(go.Bar(x=projects, y=[owed["gpu_hours"][p]["used_gpu_hours"] for p in projects], name="used"))
    text = [f"{owed['per_project'][p]:.1%}" if owed["per_project"].get(p) is not None else "" for p in projects]
    fig.add_trace(go.Scatter(x=projects, y=[owed["gpu_hours"][p]["owed_gpu_hours"] for p in projects], text=text,
                             mode="text", textposition="top center", name="delivered", showlegend=False))
    fig.update_layout(title="Owed and used allocated GPU-hours per project (Ai2's measure)", barmode="group",
                      yaxis_title="GPU-hours")
    return fig


def waits_figure(by_class: dict[str, list[float]]) -> go.Figure:
    fig = go.Figure()
    for name in CLASSES:
        values = sorted(by_class[name])
        if not values:
            continue
        # An empirical CDF, thinned to at most 400 points.
        step = max(1, len(values) // 400)
        picked = list(range(0, len(values), step))
        if picked[-1] != len(values) - 1:
            picked.append(len(values) - 1)
        fig.add_trace(go.Scatter(x=[max(values[i], 1.0) for i in picked], y=[(i + 1) / len(values) for i in picked],
                                 mode="lines", name=f"{name} ({len(values)} jobs)", line={"shape": "hv"}))
    fig.update_layout(title="Wait from submission to first start, by class (CDF; jobs not started: wait so far)",
                      xaxis={"type": "log", "title": "seconds (log; 0 shown at 1)"},
                      yaxis={"title": "fraction of jobs", "range": [0, 1.02]})
    return fig


def fragmentation_figure(series: dict) -> go.Figure:
    days = [h / 24 for h in series["hours"]]
    fig = go.Figure()
    for k, values in series["stranded"].items():
        fig.add_trace(go.Scatter(x=days, y=values, mode="lines", name=f"stranded({k})"))
    fig.update_layout(title="Free GPUs no k-GPU domain job could use (fraction of free GPUs), hourly averages",
                      xaxis_title="day", yaxis={"title": "stranded(k)", "range": [0, 1.02]})
    return fig


def goodput_figure(goodput: dict) -> go.Figure:
    projects = sorted(goodput["per_project"])
    values = [goodput["per_project"][p] for p in projects]
    fig = go.Figure(go.Bar(x=projects, y=values, text=[f"{v:.1%}" for v in values], textposition="outside",
                           name="goodput"))
    fig.update_layout(title="Goodput per project: GPU-seconds of work kept ÷ GPU-seconds held",
                      yaxis={"title": "goodput", "range": [min([0.8, *values]) - 0.02, 1.05], "tickformat": ".0%"})
    return fig


def cost_paragraph(summary: dict) -> str:
    """What the run's preemptions cost, in words (the summary's issue-18 figures)."""
    good = summary["goodput"]
    wasted = summary["wasted_preemptions"]
    per = summary["preemptions_per_job"]

    def share(value) -> str:
        return "—" if value is None else f"{value:.2%}"

    def per_job(name: str) -> str:
        figures = per[name]
        if not figures["jobs"]:
            return f"no {name} jobs"
        return (f"{name} jobs {figures['mean']:.2f} on average, {figures['p99']} at the 99th percentile, "
                f"{figures['max']} at most")
    return (f"<p>Preemptions: {summary['preemptions']} ({per_job('allocated')}; {per_job('unallocated')}). "
            f"Wasted: {share(wasted['share'])} of the {wasted['on_behalf']} preemptions on behalf of a job were not "
            f"followed by that job's start within the grace period and two ticks. Goodput {share(good['overall'])} "
            f"(allocated jobs {share(good.get('allocated'))}, unallocated {share(good.get('unallocated'))}; worst "
            f"project with an allocation {html.escape(str(good['worst_project']))} {share(good['worst'])}): "
            f"{summary['lost_gpu_hours']:,.1f} GPU-hours lost, {summary['restart_overhead_gpu_hours']:,.1f} of them "
            f"restart overhead ({summary['restart_overhead_seconds']:g} s per restart unless a job gives its own).</p>")


def write_report(result, path: Path) -> None:
    summary = result.summary
    series = result.tracker.hourly_series()
    owed = result.tracker.owed_delivered()
    parts = []
    if series["hours"]:
        parts.append(_figure(occupancy_figure(series, result.tracker.total_gpus), "occupancy"))
        parts.append(_figure(usage_figure(series, owed), "usage"))
        if owed["gpu_hours"]:
            parts.append(_figure(delivered_figure(owed), "delivered"))
        parts.append(_figure(fragmentation_figure(series), "fragmentation"))
    parts.append(_figure(waits_figure(waits(result)), "waits"))
    if summary["goodput"]["per_project"]:
        parts.append(_figure(goodput_figure(summary["goodput"]), "goodput"))
    shown = {key: value for key, value in summary.items() if key != "wall_seconds"}
    title = f"Allot simulation: {html.escape(result.cluster.name)}, policy {html.escape(result.policy)}"
    document = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1100px; color: #222; }}
pre {{ background: #f6f6f6; padding: 1rem; overflow-x: auto; font-size: 12px; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>{summary['jobs']} jobs over {summary['sim_seconds'] / 86400:.2f} simulated days on {summary['total_gpus']} GPUs.
Occupancy {summary['occupancy']:.2%} of healthy GPUs (allocated {summary['allocated_occupancy']:.2%},
unallocated {summary['unallocated_occupancy']:.2%}); availability {summary['availability']:.2%}.</p>
{cost_paragraph(summary)}
{''.join(parts)}
<h2>Summary</h2>
<pre>{html.escape(json.dumps(shown, indent=2))}</pre>
</body>
</html>
"""
    path.write_text(document, encoding="utf-8")
