// A router policy's cost-quality curve on held-out cases and its operating point (router policy page).
// Data from the json_script "router-curve-data": {curve: [{x, y, lo, hi, t}], point: {x, y}, target}.
(function () {
  "use strict";
  function draw() {
    const el = document.getElementById("router-curve-data");
    if (!el || typeof Chart === "undefined") return;
    const d = JSON.parse(el.textContent);
    const xs = d.curve.map((p) => p.x);
    new Chart(document.getElementById("chart-router-curve"), {
      type: "scatter",
      data: {
        datasets: [
          { label: "quality ÷ strong (test cases)", data: d.curve, showLine: true, borderColor: "#0d6efd", pointRadius: 2 },
          { label: "95 % interval, low", data: d.curve.map((p) => ({ x: p.x, y: p.lo })), showLine: true, borderColor: "#9ec5fe", pointRadius: 0, borderDash: [4, 3] },
          { label: "operating point", data: [d.point], borderColor: "#dc3545", backgroundColor: "#dc3545", pointRadius: 6 },
          { label: "target", data: [{ x: Math.min(...xs, 0), y: d.target }, { x: Math.max(...xs, 1), y: d.target }], showLine: true, borderColor: "#6c757d", pointRadius: 0, borderDash: [2, 2] },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "cost ÷ strong-only cost" } }, y: { title: { display: true, text: "quality ÷ strong quality" } } },
        plugins: { tooltip: { callbacks: { label: (c) => (c.raw.t !== undefined ? `threshold ${c.raw.t}: ` : "") + `cost ${c.raw.x}, quality ${c.raw.y}` } } },
      },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
