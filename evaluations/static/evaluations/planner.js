// Side-by-side chart of a capacity plan: monthly cost and GPUs per candidate. Data: json_script "plan-data".
(function () {
  "use strict";
  function draw() {
    const el = document.getElementById("plan-data");
    if (!el || typeof Chart === "undefined") return;
    const d = JSON.parse(el.textContent);
    new Chart(document.getElementById("chart-plan"), {
      data: {
        labels: d.labels,
        datasets: [
          { type: "bar", label: "monthly cost ($)", data: d.monthly_usd, backgroundColor: d.labels_kind.map((k) => (k === "measured" ? "#198754" : "#6f42c1")), yAxisID: "y" },
          { type: "line", label: "GPUs", data: d.gpus, borderColor: "#fd7e14", yAxisID: "y2" },
        ],
      },
      options: {
        animation: false, maintainAspectRatio: false,
        scales: { y: { beginAtZero: true, title: { display: true, text: "$ / month" } }, y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "GPUs" } } },
      },
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
