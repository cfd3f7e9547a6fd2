// Replicas running over time on a deployment's page: a stepped line from the json_script
// "replica-history-data" (times and counts from the deployment's status and replicas events).
// No inline script and no time adapter: x is milliseconds, labelled as local clock time.
(function () {
  "use strict";
  function draw() {
    const el = document.getElementById("replica-history-data");
    const canvas = document.getElementById("chart-replicas");
    if (!el || !canvas || typeof Chart === "undefined") return;
    const d = JSON.parse(el.textContent);
    const points = d.times.map((t, i) => ({ x: Date.parse(t), y: d.replicas[i] }));
    new Chart(canvas, {
      type: "line",
      data: { datasets: [{ label: "replicas running", data: points, stepped: true, borderColor: "#0d6efd", pointRadius: 2 }] },
      options: {
        animation: false,
        maintainAspectRatio: false,
        plugins: { legend: { display: false } },
        scales: {
          x: { type: "linear", ticks: { maxTicksLimit: 6, callback: (v) => new Date(v).toLocaleTimeString() } },
          y: { beginAtZero: true, ticks: { precision: 0 } },
        },
      },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
