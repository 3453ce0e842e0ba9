// The host page's health timeline: every recorded event on one time axis, one row per kind.
// Redrawn when htmx refreshes the page's data in place.
(function () {
  "use strict";
  var colors = {"state change": "#1f3a5f", "XID error": "#b54a4a", "GPUs missing": "#e08a3c",
                "heartbeat lost": "#8a5fb5", "inventory change": "#5b6675"};
  var rows = ["state change", "XID error", "GPUs missing", "heartbeat lost", "inventory change"];

  // Plotly reads a few HTML tags in labels: people's reasons are shown as text, never as markup.
  function escape(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function draw() {
    var element = document.getElementById("host-timeline");
    var source = document.getElementById("host-timeline-data");
    if (!element || !source || typeof Plotly === "undefined") { return; }
    var data = JSON.parse(source.textContent);
    var events = data.events;
    if (events.length === 0) {
      Plotly.purge(element);
      element.innerHTML = '<p class="muted pad">Nothing recorded yet.</p>';
      return;
    }
    if (!element.classList.contains("js-plotly-plot")) { element.innerHTML = ""; }
    var traces = rows.map(function (kind) {
      var mine = events.filter(function (e) { return e.kind === kind; });
      return {
        x: mine.map(function (e) { return e.at; }), y: mine.map(function () { return kind; }),
        text: mine.map(function (e) { return escape(e.detail + " — " + e.actor); }), name: kind, type: "scatter",
        mode: "markers", marker: {size: 11, color: colors[kind], symbol: kind === "XID error" ? "x" : "circle"},
        hovertemplate: "%{x}<br>%{text}<extra></extra>"
      };
    }).filter(function (trace) { return trace.x.length > 0; });
    var first = events.reduce(function (earliest, e) { return e.at < earliest ? e.at : earliest; }, data.now);
    var start = Math.min(Date.parse(first), Date.parse(data.now) - 3600 * 1000);
    var span = Date.parse(data.now) - start;
    var layout = {
      height: 90 + 34 * traces.length, margin: {l: 120, r: 15, t: 10, b: 30}, showlegend: false,
      xaxis: {type: "date", range: [new Date(start - span * 0.02).toISOString(), new Date(Date.parse(data.now) + span * 0.02).toISOString()]},
      yaxis: {type: "category", automargin: true}, hovermode: "closest",
      font: {family: "system-ui, sans-serif", size: 12}
    };
    Plotly.react(element, traces, layout, {displaylogo: false, responsive: true});
  }

  draw();
  document.body.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.id === "host-live") { draw(); }
  });
})();
