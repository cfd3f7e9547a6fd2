// GPU cost vs billed vs idle per day (admin cost page). Data from the json_script "gpu-cost-data".
(function () {
  "use strict";
  function draw() {
    const el = document.getElementById("gpu-cost-data");
    if (!el || typeof Chart === "undefined") return;
    const d = JSON.parse(el.textContent);
    new Chart(document.getElementById("chart-gpu-cost"), {
      type: "bar",
      data: {
        labels: d.labels,
        datasets: [
          { label: "billed to tenants ($)", data: d.billed_usd, backgroundColor: "#198754", stack: "s" },
          { label: "idle / unallocated ($)", data: d.idle_usd, backgroundColor: "#dc3545", stack: "s" },
          { type: "line", label: "GPU cost ($)", data: d.cost_usd, borderColor: "#212529" },
        ],
      },
      options: { animation: false, maintainAspectRatio: false, scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true } } },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
