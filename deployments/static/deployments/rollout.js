// Live charts of a rollout: per-side series of each checked metric with its limit, from the
// rollout's chart-data JSON, refreshed while the rollout is active. No inline script: the page
// gives the URL and poll period as data attributes.
(function () {
  "use strict";
  const SIDES = { stable: "#0d6efd", canary: "#fd7e14" };
  const charts = {};

  function pts(series) {
    return series.filter((p) => p[1] !== null).map((p) => ({ x: p[0], y: p[1] }));
  }

  function limitSeries(m) {
    // Relative limits follow stable (stable × limit); absolute ones are a flat line.
    return m.limits.map((l) => {
      if (l.relative) return { label: "limit (" + l.limit + " × stable)", data: pts(m.stable).map((p) => ({ x: p.x, y: p.y * l.limit })) };
      const xs = pts(m.stable).concat(pts(m.canary)).map((p) => p.x);
      if (!xs.length) return { label: "limit", data: [] };
      return { label: "limit " + l.limit + " " + m.unit, data: [{ x: Math.min.apply(null, xs), y: l.limit }, { x: Math.max.apply(null, xs), y: l.limit }] };
    });
  }

  function datasets(m) {
    const out = [
      { label: "stable", data: pts(m.stable), borderColor: SIDES.stable, backgroundColor: SIDES.stable, pointRadius: 2, tension: 0 },
      { label: "canary", data: pts(m.canary), borderColor: SIDES.canary, backgroundColor: SIDES.canary, pointRadius: 2, tension: 0 },
    ];
    limitSeries(m).forEach((l) => out.push(Object.assign(l, { borderColor: "#dc3545", borderDash: [6, 4], pointRadius: 0, tension: 0 })));
    return out;
  }

  function draw(root, data) {
    document.getElementById("chart-requests").textContent = "stable " + data.requests.stable + ", canary " + data.requests.canary + " requests";
    document.getElementById("chart-bucket").textContent = data.bucket_s;
    root.querySelectorAll("canvas[data-metric]").forEach((canvas) => {
      const key = canvas.dataset.metric;
      const m = data.metrics[key];
      if (!m) return;
      if (charts[key]) {
        charts[key].data.datasets = datasets(m);
        charts[key].update("none");
        return;
      }
      charts[key] = new Chart(canvas, {
        type: "line",
        data: { datasets: datasets(m) },
        options: {
          animation: false,
          parsing: false,
          maintainAspectRatio: false,
          scales: {
            x: { type: "linear", title: { display: true, text: "seconds since start" } },
            y: { beginAtZero: true, title: { display: true, text: m.label + " (" + m.unit + ")" } },
          },
          plugins: { legend: { position: "bottom" }, title: { display: true, text: m.label } },
        },
      });
    });
  }

  function start() {
    const root = document.getElementById("rollout-charts");
    if (!root || typeof Chart === "undefined") return;
    const poll = parseInt(root.dataset.pollMs || "2000", 10);
    function load() {
      fetch(root.dataset.url, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((data) => { if (data) draw(root, data); })
        .catch(() => {})
        .finally(() => { if (root.dataset.live === "1") setTimeout(load, Math.max(poll, 1000)); });
    }
    load();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
