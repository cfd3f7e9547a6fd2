// Charts of a tenant's cost page. Data comes from the json_script element "cost-data"; nothing is fetched.
(function () {
  "use strict";
  function draw() {
    const el = document.getElementById("cost-data");
    if (!el || typeof Chart === "undefined") return;
    const d = JSON.parse(el.textContent);
    const base = { animation: false, maintainAspectRatio: false, plugins: { legend: { position: "bottom" } } };
    new Chart(document.getElementById("chart-spend"), {
      data: {
        labels: d.labels,
        datasets: [
          { type: "bar", label: "spend ($)", data: d.cost_usd, backgroundColor: "#0d6efd", yAxisID: "y" },
          { type: "line", label: "input tokens", data: d.prompt_tokens, borderColor: "#198754", yAxisID: "y2", pointRadius: 2 },
          { type: "line", label: "output tokens", data: d.completion_tokens, borderColor: "#fd7e14", yAxisID: "y2", pointRadius: 2 },
        ],
      },
      options: Object.assign({}, base, {
        scales: {
          y: { beginAtZero: true, title: { display: true, text: "$" } },
          y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "tokens" } },
        },
      }),
    });
    new Chart(document.getElementById("chart-models"), {
      type: "doughnut",
      data: { labels: d.by_model.labels, datasets: [{ data: d.by_model.cost_usd }] },
      options: base,
    });
    const b = d.burndown;
    const canvas = document.getElementById("chart-burndown");
    if (b && canvas) {
      const labels = b.labels.concat([b.period_end]);
      new Chart(canvas, {
        type: "line",
        data: {
          labels: labels,
          datasets: [
            { label: "spent ($, cumulative)", data: b.spent_usd, borderColor: "#0d6efd" },
            { label: "forecast ($)", data: labels.map((_, i) => (i === labels.length - 1 ? b.forecast_usd : (i === b.labels.length - 1 ? b.spent_usd[i] : null))), borderColor: "#6f42c1", borderDash: [5, 4], spanGaps: true },
            { label: "cap ($)", data: labels.map(() => b.cap_usd), borderColor: "#dc3545", pointRadius: 0 },
          ],
        },
        options: Object.assign({}, base, { scales: { y: { beginAtZero: true } } }),
      });
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
