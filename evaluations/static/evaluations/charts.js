// Charts of a benchmark report (detail page) and of a comparison (compare page).
// Data comes from a json_script element; nothing is fetched.
(function () {
  "use strict";
  const COLORS = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997"];

  function xy(xs, ys) {
    return xs.map((x, i) => ({ x: x, y: ys[i] })).filter((p) => p.y !== null && p.y !== undefined);
  }

  function line(ctx, datasets, xTitle, yTitle, extra) {
    return new Chart(ctx, {
      type: "line",
      data: { datasets: datasets },
      options: Object.assign({
        animation: false,
        parsing: false,
        maintainAspectRatio: false,
        scales: {
          x: { type: "linear", title: { display: true, text: xTitle } },
          y: { beginAtZero: true, title: { display: true, text: yTitle } },
        },
        plugins: { legend: { position: "bottom" } },
      }, extra || {}),
    });
  }

  function ds(label, data, i, more) {
    return Object.assign({ label: label, data: data, borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length], pointRadius: 3, tension: 0 }, more || {});
  }

  function report(d) {
    const unit = d.unit || "req/s";
    line(document.getElementById("chart-latency"), [
      ds("TTFT p50 (ms)", xy(d.levels, d.ttft_p50), 0),
      ds("TTFT p99 (ms)", xy(d.levels, d.ttft_p99), 0, { borderDash: [5, 4] }),
      ds("TPOT p50 (ms)", xy(d.levels, d.tpot_p50), 1, { yAxisID: "y2" }),
      ds("TPOT p99 (ms)", xy(d.levels, d.tpot_p99), 1, { yAxisID: "y2", borderDash: [5, 4] }),
    ], "offered load (" + unit + ")", "TTFT (ms)", {
      animation: false, parsing: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "offered load (" + unit + ")" } },
        y: { beginAtZero: true, title: { display: true, text: "TTFT (ms)" } },
        y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "TPOT (ms)" } },
      },
    });
    line(document.getElementById("chart-goodput"), [
      ds("request goodput (req/s)", xy(d.levels, d.request_goodput), 2),
      ds("request throughput (req/s)", xy(d.levels, d.request_throughput), 0, { borderDash: [5, 4] }),
      ds("SLA attainment", xy(d.levels, d.attainment), 3, { yAxisID: "y2" }),
    ], "offered load (" + unit + ")", "req/s", {
      animation: false, parsing: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "offered load (" + unit + ")" } },
        y: { beginAtZero: true, title: { display: true, text: "req/s" } },
        y2: { min: 0, max: 1, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "attainment" } },
      },
    });
    const centers = (h) => h.edges.slice(0, -1).map((e, i) => (e + h.edges[i + 1]) / 2);
    line(document.getElementById("chart-dist"), [
      ds("TTFT (ms)", xy(centers(d.ttft_hist), d.ttft_hist.counts), 0, { stepped: "middle", pointRadius: 0 }),
      ds("TPOT (ms)", xy(centers(d.tpot_hist), d.tpot_hist.counts), 1, { stepped: "middle", pointRadius: 0, xAxisID: "x2" }),
    ], "TTFT (ms)", "requests", {
      animation: false, parsing: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "TTFT (ms)" } },
        x2: { type: "linear", position: "top", title: { display: true, text: "TPOT (ms)" } },
        y: { beginAtZero: true, title: { display: true, text: "requests" } },
      },
    });
    if (d.series_t.length) {
      line(document.getElementById("chart-kv"), [
        ds("KV cache usage", xy(d.series_t, d.series_kv), 4, { pointRadius: 0 }),
        ds("running", xy(d.series_t, d.series_running), 2, { pointRadius: 0, yAxisID: "y2" }),
        ds("waiting", xy(d.series_t, d.series_waiting), 1, { pointRadius: 0, yAxisID: "y2" }),
      ], "time (s)", "KV usage", {
        animation: false, parsing: false, maintainAspectRatio: false,
        scales: {
          x: { type: "linear", title: { display: true, text: "time since start (s)" } },
          y: { min: 0, max: 1, title: { display: true, text: "KV cache usage" } },
          y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "requests" } },
        },
      });
    }
  }

  function compare(d) {
    const unit = d.a.unit || "req/s";
    line(document.getElementById("chart-compare-goodput"), [
      ds("A: request goodput", xy(d.a.levels, d.a.request_goodput), 0),
      ds("B: request goodput", xy(d.b.levels, d.b.request_goodput), 1),
      ds("A: attainment", xy(d.a.levels, d.a.attainment), 0, { yAxisID: "y2", borderDash: [5, 4] }),
      ds("B: attainment", xy(d.b.levels, d.b.attainment), 1, { yAxisID: "y2", borderDash: [5, 4] }),
    ], "offered load (" + unit + ")", "req/s", {
      animation: false, parsing: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "offered load (" + unit + ")" } },
        y: { beginAtZero: true, title: { display: true, text: "goodput (req/s)" } },
        y2: { min: 0, max: 1, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "attainment" } },
      },
    });
    line(document.getElementById("chart-compare-latency"), [
      ds("A: TTFT p99", xy(d.a.levels, d.a.ttft_p99), 0),
      ds("B: TTFT p99", xy(d.b.levels, d.b.ttft_p99), 1),
      ds("A: TPOT p99", xy(d.a.levels, d.a.tpot_p99), 0, { yAxisID: "y2", borderDash: [5, 4] }),
      ds("B: TPOT p99", xy(d.b.levels, d.b.tpot_p99), 1, { yAxisID: "y2", borderDash: [5, 4] }),
    ], "offered load", "ms", {
      animation: false, parsing: false, maintainAspectRatio: false,
      scales: {
        x: { type: "linear", title: { display: true, text: "offered load (" + unit + ")" } },
        y: { beginAtZero: true, title: { display: true, text: "TTFT p99 (ms)" } },
        y2: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "TPOT p99 (ms)" } },
      },
    });
  }

  function init() {
    if (typeof Chart === "undefined") return;
    const el = document.getElementById("chart-data");
    if (el) report(JSON.parse(el.textContent));
    const cmp = document.getElementById("compare-data");
    if (cmp) compare(JSON.parse(cmp.textContent));
    document.body.dataset.chartsReady = "1";
  }
  if (document.readyState === "complete") init();
  else window.addEventListener("load", init);
})();
