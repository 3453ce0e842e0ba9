// The cluster dashboard's charts: fetch the data for the chosen range, draw with Plotly (served locally),
// fetch again every 30 s. The range selector works without this script (plain links), faster with it.
(function () {
  "use strict";
  var root = document.getElementById("dashboard");
  if (!root || typeof Plotly === "undefined") { return; }
  var url = root.dataset.url;
  var range = root.dataset.range || "24h";
  var updated = root.querySelector("[data-testid=updated]");
  var colors = {
    allocated: "#2e7d5b", unallocated: "#7fc8a9", idle: "#c9d3de", unavailable: "#b54a4a",
    reserved: "#f2c14e", brand: "#1f3a5f", muted: "#5b6675"
  };
  var sizeColors = {"8": "#7fc8a9", "16": "#2e7d5b", "32": "#1f5fa8", "72": "#b54a4a"};
  var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

  // Plotly reads a few HTML tags in labels: names are shown as text, never as markup.
  function escape(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // The time axis of every history chart: the whole chosen range, in the pages' time zone (the server sends
  // times in it, without an offset), whether there is one sample in it or hundreds.
  var timeAxis = {type: "date"};

  function layout(extra) {
    var base = {
      height: 280, margin: {l: 55, r: 15, t: 10, b: 40}, legend: {orientation: "h", y: -0.22},
      hovermode: "x unified", font: {family: "system-ui, sans-serif", size: 12},
      xaxis: timeAxis, yaxis: {rangemode: "tozero"}
    };
    return Object.assign(base, extra || {});
  }

  // A line needs two points: with fewer, each point is drawn as a marker too.
  function shown(trace) {
    if (trace.x && trace.x.length < 3 && trace.mode === "lines") { trace.mode = "lines+markers"; }
    return trace;
  }

  function draw(id, traces, extra) {
    var element = document.getElementById(id);
    if (element) { Plotly.react(element, traces.map(shown), layout(extra), config); }
  }

  function area(x, y, name, color) {
    return {x: x, y: y, name: name, type: "scatter", mode: "lines", stackgroup: "one",
            line: {width: 0.5, color: color}, fillcolor: color, marker: {color: color, size: 7}};
  }

  function nothingYet(data, points) {
    if (points > 0) { return []; }
    return [{text: "No samples in this range yet.<br>The first appears by " + data.next_sample + " " + data.zone +
                   "<br>(one every " + Math.round(data.sample_seconds / 60) + " min).",
             showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}];
  }

  function render(data) {
    var s = data.samples;
    timeAxis = {type: "date", range: [data.range_start, data.range_end], hoverformat: "%Y-%m-%d %H:%M"};
    var empty = nothingYet(data, s.x.length);
    draw("plot-occupancy", [
      area(s.x, s.allocated, "allocated (charged)", colors.allocated),
      area(s.x, s.unallocated, "unallocated (free)", colors.unallocated),
      area(s.x, s.idle, "idle", colors.idle),
      area(s.x, s.unavailable, "unavailable", colors.unavailable)
    ], {yaxis: {title: {text: "GPUs"}, rangemode: "tozero"}, annotations: empty});

    var domains = data.domains;
    var sizes = Object.keys(s.stranded);
    draw("plot-domains", [{
      x: domains.map(function (d) { return d.domain; }), y: domains.map(function (d) { return d.free; }),
      type: "bar", name: "free GPUs", marker: {color: colors.allocated},
      customdata: domains.map(function (d) { return [d.total, d.in_use, d.unavailable]; }),
      hovertemplate: "%{x}: %{y} free of %{customdata[0]} (%{customdata[1]} in use, %{customdata[2]} unavailable)<extra></extra>"
    }], {
      xaxis: {type: "category"}, hovermode: "closest", yaxis: {title: {text: "free GPUs"}, rangemode: "tozero"},
      shapes: sizes.map(function (k) {
        return {type: "line", xref: "paper", x0: 0, x1: 1, y0: +k, y1: +k,
                line: {color: sizeColors[k] || colors.muted, dash: "dot", width: 1}};
      }),
      annotations: sizes.map(function (k) {
        return {xref: "paper", x: 1, y: +k, text: k, showarrow: false, xanchor: "right", yanchor: "bottom",
                font: {size: 10, color: sizeColors[k] || colors.muted}};
      })
    });

    draw("plot-stranded", sizes.map(function (k) {
      return {x: s.x, y: s.stranded[k].map(function (v) { return v * 100; }), name: k + " GPUs", type: "scatter",
              mode: "lines", line: {color: sizeColors[k] || colors.muted, width: 2}};
    }), {yaxis: {title: {text: "% of free GPUs"}, range: [0, 105]}, annotations: empty});

    draw("plot-largest", [
      {x: s.x, y: s.largest_placeable, name: "largest placeable job", type: "scatter", mode: "lines",
       line: {shape: "hv", color: colors.brand, width: 2}},
      {x: s.x, y: s.free, name: "free GPUs", type: "scatter", mode: "lines",
       line: {color: colors.unallocated, width: 1.5, dash: "dot"}}
    ], {yaxis: {title: {text: "GPUs"}, rangemode: "tozero"}, annotations: empty});

    draw("plot-demand", [
      {x: s.x, y: s.healthy, name: "healthy GPUs", type: "scatter", mode: "lines",
       line: {color: colors.brand, width: 2}},
      {x: s.x, y: s.idle, name: "idle GPUs", type: "scatter", mode: "lines",
       line: {color: colors.muted, width: 1, dash: "dot"}},
      {x: s.x, y: s.pending_gpus, name: "pending: GPUs asked", type: "scatter", mode: "lines", fill: "tozeroy",
       line: {color: colors.reserved, width: 1.5}},
      {x: s.x, y: s.pending_allocated_gpus, name: "of which allocated", type: "scatter", mode: "lines",
       line: {color: "#b07d12", width: 1.5}}
    ], {yaxis: {title: {text: "GPUs"}, rangemode: "tozero"}, annotations: empty});

    var c = data.consumption.slice().reverse();
    var labels = c.map(function (p) { return escape(p.parent ? p.parent + " › " + p.project : p.project); });
    function ratioText(value) {
      var percent = value * 100;
      var digits = percent === 0 || percent >= 10 ? 0 : (percent < 1 ? 2 : 1);
      return percent.toFixed(digits) + " % used";
    }
    function ratio(p) { return p.ratio === null ? "no allocation" : ratioText(p.ratio) + " of the entitlement"; }
    draw("plot-consumption", [
      {y: labels, x: c.map(function (p) { return p.used; }), name: "used, allocated (charged)", type: "bar",
       orientation: "h", marker: {color: colors.allocated}, customdata: c.map(ratio),
       hovertemplate: "%{y}: %{x:.1f} GPU-h charged, %{customdata}<extra></extra>"},
      {y: labels, x: c.map(function (p) { return p.unallocated; }), name: "used, unallocated (free)", type: "bar",
       orientation: "h", marker: {color: colors.unallocated},
       hovertemplate: "%{y}: %{x:.1f} GPU-h free<extra></extra>"},
      {y: labels, x: c.map(function (p) { return p.entitled; }), name: "entitled", type: "scatter",
       mode: "markers+text", text: c.map(function (p) { return p.ratio === null ? "" : ratioText(p.ratio); }),
       textposition: "middle right", textfont: {size: 11, color: colors.brand}, cliponaxis: false,
       marker: {symbol: "line-ns-open", size: 22, line: {width: 3, color: colors.brand}},
       hovertemplate: "%{y}: entitled to %{x:.1f} GPU-h<extra></extra>"}
    ], {barmode: "stack", height: Math.max(220, 38 * c.length + 70), hovermode: "closest",
        // The legend above the bars: below them it sat on the axis title, whatever the chart's height.
        margin: {l: 150, r: 90, t: 34, b: 40}, legend: {orientation: "h", x: 0, y: 1, yanchor: "bottom"},
        xaxis: {title: {text: "GPU-hours in the window"}},
        yaxis: {automargin: true}});

    var p = data.by_project;
    var palette = ["#2e7d5b", "#1f5fa8", "#f2c14e", "#b54a4a", "#7fc8a9", "#8a5fb5", "#e08a3c", "#5b6675"];
    draw("plot-projects", Object.keys(p.projects).map(function (name, i) {
      return area(p.x, p.projects[name], escape(name), palette[i % palette.length]);
    }), {yaxis: {title: {text: "GPUs"}, rangemode: "tozero"}, annotations: nothingYet(data, p.x.length)});

    draw("plot-ticks", [
      {x: s.x, y: s.tick_max.map(function (v) { return v * 1000; }), name: "slowest", type: "scatter",
       mode: "lines", line: {color: colors.unavailable, width: 1}},
      {x: s.x, y: s.tick_mean.map(function (v) { return v === null ? null : v * 1000; }), name: "mean",
       type: "scatter", mode: "lines", line: {color: colors.brand, width: 2}}
    ], {yaxis: {title: {text: "milliseconds"}, rangemode: "tozero"}, annotations: empty});

    if (updated) {
      updated.textContent = "updated " + data.range_end.slice(11, 19) + " " + data.zone + " · " + s.x.length + " points";
    }
  }

  function load() {
    fetch(url + "?range=" + encodeURIComponent(range), {credentials: "same-origin", headers: {Accept: "application/json"}})
      .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
      .then(render)
      .catch(function (problem) { if (updated) { updated.textContent = "could not load the charts (" + problem + ")"; } });
  }

  root.querySelectorAll(".range a").forEach(function (link) {
    link.addEventListener("click", function (event) {
      event.preventDefault();
      range = link.dataset.range;
      root.querySelectorAll(".range a").forEach(function (other) { other.removeAttribute("aria-current"); });
      link.setAttribute("aria-current", "true");
      history.replaceState(null, "", "?range=" + range);
      load();
    });
  });
  load();
  setInterval(function () { if (!document.hidden) { load(); } }, 30000);
})();
