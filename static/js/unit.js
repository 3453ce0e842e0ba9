// The unit page's chart: usage against entitlement (data from the page's json_script).
(function () {
  var source = document.getElementById("usage-data");
  if (!source || !window.Plotly) return;
  var data = JSON.parse(source.textContent);
  var traces = [
    {x: data.x, y: data.allocated, name: "allocated (charged)", type: "bar", marker: {color: "#2e7d5b"}},
    {x: data.x, y: data.unallocated, name: "unallocated (free)", type: "bar", marker: {color: "#7fc8a9"}},
    {x: data.entitled_x, y: data.entitled, name: "entitled", type: "scatter", mode: "lines",
     line: {shape: "hv", color: "#1f3a5f", width: 2}}
  ];
  var layout = {
    barmode: "stack", bargap: 0, height: 320, margin: {l: 50, r: 20, t: 10, b: 40},
    yaxis: {title: {text: "GPUs"}, rangemode: "tozero"}, legend: {orientation: "h", y: -0.2},
    shapes: [{type: "line", xref: "x", yref: "paper", x0: data.now, x1: data.now, y0: 0, y1: 1,
              line: {color: "#5b6675", dash: "dot", width: 1}}]
  };
  Plotly.newPlot("usage-plot", traces, layout, {displaylogo: false, responsive: true});
})();
