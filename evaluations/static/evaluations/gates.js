// Quality charts of the gate pages: per category, the mean as a point and its 95 % interval as a
// floating bar (Chart.js has no error-bar type; a [low, high] bar draws the same thing).
// Data comes from json_script elements or a data-chart attribute; charts are (re)drawn whenever htmx swaps content in.
(function () {
  "use strict";
  const COLORS = { candidate: "#0d6efd", baseline: "#6c757d" };

  function draw(canvas) {
    if (canvas.dataset.drawn || typeof Chart === "undefined") return;
    // A page carries its data in a json_script block; a partial swapped in by htmx carries it in
    // data-chart (htmx drops <script> elements from swapped content under this CSP).
    let text = canvas.dataset.chart;
    if (!text) {
      const source = document.getElementById(canvas.dataset.source || "quality-chart-data");
      if (!source) return;
      text = source.textContent;
    }
    const d = JSON.parse(text);
    const sets = [];
    ["candidate", "baseline"].forEach(function (name) {
      const rows = d[name];
      if (!rows) return;
      sets.push({
        type: "bar", label: name + " 95 % interval", backgroundColor: COLORS[name] + "55",
        borderColor: COLORS[name], borderWidth: 1, barPercentage: 0.5,
        data: rows.map(function (r) { return r ? [r.low, r.high] : null; }),
      });
      sets.push({
        type: "scatter", label: name + " mean", backgroundColor: COLORS[name], pointRadius: 5,
        data: rows.map(function (r, i) { return r ? { x: d.categories[i], y: r.mean } : null; }).filter(Boolean),
      });
    });
    canvas.dataset.drawn = "1";
    new Chart(canvas, {
      data: { labels: d.categories, datasets: sets },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { x: { type: "category" }, y: { min: 0, max: 1, title: { display: true, text: "score (0–1)" } } },
        plugins: { legend: { position: "bottom" } },
      },
    });
  }

  function drawAll() {
    document.querySelectorAll("canvas#chart-quality, canvas.chart-quality").forEach(draw);
  }
  document.addEventListener("DOMContentLoaded", drawAll);
  document.addEventListener("htmx:load", drawAll);
  window.addEventListener("load", drawAll);
})();
