// Charts of the campaign and shape pages; data from the Dashboard JSON API. Every speedup drawn
// here is a same-session ratio the server computed (webapp.campaigns.ratios); none is made here.
(function () {
  "use strict";
  // Colours: each baseline's comes from the server (selectors.BASELINE_COLOURS), the same on every
  // chart; these two are for what is not a baseline.
  const GREY = "#94a3b8";
  const GREEN = "#16a34a";
  const REWARD = "cublaslt_autotune";

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(url + ": " + response.status);
    return response.json();
  }

  function noData(canvas, text) {
    const p = document.createElement("p");
    p.className = "muted no-data";
    p.textContent = text || "No data yet.";
    canvas.closest(".chart").replaceWith(p);
  }

  // A dashed line at y = 1 (a speedup of one: as fast as the baseline); the axis labels it.
  const unityLine = {
    id: "unityLine",
    afterDatasetsDraw(chart, _args, options) {
      const y = chart.scales[options.axis || "y"];
      if (!y || y.min > 1 || y.max < 1) return;
      const { ctx, chartArea } = chart;
      const py = y.getPixelForValue(1);
      ctx.save();
      ctx.strokeStyle = "#111827";
      ctx.setLineDash([6, 4]);
      ctx.beginPath();
      ctx.moveTo(chartArea.left, py);
      ctx.lineTo(chartArea.right, py);
      ctx.stroke();
      ctx.restore();
    },
  };

  // Round speedups a log axis may be labelled with; ratioTicks picks a few of them, ×1 always.
  const ROUND = [0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9,
    0.95, 1, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4, 1.5, 1.75, 2, 2.5, 3, 4, 5, 7.5, 10, 20, 50, 100];
  function ratioTicks(min, max, most) {
    const inside = ROUND.filter((v) => v >= min && v <= max);
    const gap = (Math.log(max) - Math.log(min)) / (most || 7);
    const kept = inside.includes(1) ? [1] : [];
    const keep = (list) => {
      for (const v of list) {
        if (kept.every((k) => Math.abs(Math.log(v) - Math.log(k)) >= gap)) kept.push(v);
      }
    };
    keep(inside.filter((v) => v > 1));
    keep(inside.filter((v) => v < 1).reverse());
    if (kept.length < 2) keep(inside);
    return kept.sort((a, b) => a - b);
  }
  window.gemmforgeRatioTicks = ratioTicks; // for the tests (tests/webapp/test_chart_ticks.py)

  // A log axis of speedups: labelled ×0.9, ×1, ×1.1 (above and below ×1), never crowded; it
  // spans ×0.9–×1.1 at least, so ×1 sits inside with a label on either side.
  function ratioAxis(title, most, aroundOne = true) {
    return {
      type: "logarithmic",
      title: { display: true, text: title },
      afterDataLimits: (axis) => {
        if (!aroundOne) return;
        axis.min = Math.min(axis.min / 1.03, 0.9);
        axis.max = Math.max(axis.max * 1.03, 1.1);
      },
      afterBuildTicks: (axis) => {
        axis.ticks = ratioTicks(axis.min, axis.max, most).map((value) => ({ value }));
      },
      ticks: { autoSkip: false, callback: (v) => "×" + Number(v.toPrecision(3)) },
    };
  }

  async function speedupChart(canvas) {
    const data = await getJSON(canvas.dataset.src);
    const shapes = data.shapes.filter((s) => Object.values(s.speedups).some((v) => v !== null));
    if (!shapes.length) return noData(canvas);
    shapes.sort((a, b) => (a.speedups[REWARD] ?? Infinity) - (b.speedups[REWARD] ?? Infinity));
    const many = shapes.length > 60;
    new Chart(canvas, {
      type: "line",
      data: {
        labels: shapes.map((s) => s.shape + " " + s.layout.toUpperCase()),
        datasets: data.baselines.map((b) => ({
          label: "vs " + b.label,
          borderColor: b.colour,
          backgroundColor: b.colour,
          showLine: false,
          pointRadius: many ? 1.5 : 3,
          data: shapes.map((s) => s.speedups[b.key]),
        })),
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: {
          x: { grid: { display: !many }, ticks: { display: !many, autoSkip: true, maxRotation: 60 }, title: { display: true, text: many ? shapes.length + " shapes, sorted by speedup over cuBLASLt (autotuned)" : "shape" } },
          y: ratioAxis("speedup (baseline / kernel, same session)", 8),
        },
        plugins: {
          unityLine: {},
          tooltip: { callbacks: { label: (ctx) => `${ctx.dataset.label}: ×${ctx.raw === null ? "—" : ctx.raw.toFixed(3)}` } },
        },
      },
      plugins: [unityLine],
    });
    canvas.dataset.loaded = shapes.length;
  }

  // Red below 1, green above; ±25% spans the scale (the legend under the chart says so).
  function colour(speedup) {
    if (speedup === null || speedup === undefined) return "#d1d5db";
    const t = Math.max(-1, Math.min(1, Math.log(speedup) / Math.log(1.25)));
    return t >= 0 ? `rgba(22,163,74,${0.15 + 0.85 * t})` : `rgba(220,38,38,${0.15 - 0.85 * t})`;
  }

  let heatmap = null;
  async function heatmapChart(form, canvas) {
    const params = new URLSearchParams(new FormData(form));
    const data = await getJSON(form.dataset.src + "?" + params.toString());
    const points = data.cells.map((c) => ({ x: String(c.n), y: String(c.m), speedup: c.speedup, verdict: c.verdict }));
    const ns = [...new Set(data.cells.map((c) => c.n))].sort((a, b) => a - b).map(String);
    const ms = [...new Set(data.cells.map((c) => c.m))].sort((a, b) => a - b).map(String);
    if (heatmap) heatmap.destroy();
    heatmap = new Chart(canvas, {
      type: "scatter",
      data: {
        datasets: [{
          label: `vs ${data.baseline_label} at K=${data.k} (${(data.layout || "").toUpperCase()})`,
          data: points,
          pointStyle: "rect",
          pointRadius: Math.max(4, Math.min(16, 280 / Math.max(ns.length, ms.length, 1))),
          backgroundColor: points.map((p) => colour(p.speedup)),
          borderColor: "#9ca3af",
        }],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: {
          x: { type: "category", labels: ns, title: { display: true, text: "N" } },
          y: { type: "category", labels: ms.slice().reverse(), title: { display: true, text: "M" } },
        },
        plugins: {
          tooltip: {
            callbacks: {
              label: (ctx) => `M=${ctx.raw.y} N=${ctx.raw.x}: ${ctx.raw.speedup === null ? "no ratio" : "×" + ctx.raw.speedup.toFixed(3) + " (" + ctx.raw.verdict + ")"}`,
            },
          },
        },
      },
    });
    canvas.dataset.loaded = points.length;
  }

  function historyChart(canvas, toggle, campaignWide) {
    let chart = null;
    let data = null;
    function draw() {
      const byGpu = toggle && toggle.checked;
      const points = data.points;
      const x = (p) => (byGpu ? p.gpu_s : p.index);
      const datasets = [];
      if (campaignWide) {
        datasets.push({ label: "geomean of best so far vs " + data.baseline_label, data: points.filter((p) => p.geomean !== null).map((p) => ({ x: x(p), y: p.geomean })), borderColor: data.baseline_colour, pointRadius: 0, stepped: true, yAxisID: "y" });
        datasets.push({ label: "shapes faster", data: points.map((p) => ({ x: x(p), y: p.faster })), borderColor: GREEN, pointRadius: 0, stepped: true, yAxisID: "y2" });
      } else {
        datasets.push({ label: "candidate", type: "scatter", data: points.filter((p) => p.speedup !== null).map((p) => ({ x: x(p), y: p.speedup })), backgroundColor: GREY, pointRadius: 2 });
        datasets.push({ label: "best so far", data: points.filter((p) => p.best !== null).map((p) => ({ x: x(p), y: p.best })), borderColor: data.baseline_colour, pointRadius: 0, stepped: true });
      }
      const scales = {
        x: { type: "linear", title: { display: true, text: byGpu ? "GPU seconds spent" : "candidates made" } },
        y: ratioAxis("speedup vs " + data.baseline_label, 7),
      };
      if (campaignWide) scales.y2 = { position: "right", title: { display: true, text: "shapes faster" }, grid: { drawOnChartArea: false }, beginAtZero: true };
      if (chart) chart.destroy();
      chart = new Chart(canvas, { type: "line", data: { datasets }, options: { animation: false, maintainAspectRatio: false, parsing: false, scales, plugins: { unityLine: {} } }, plugins: [unityLine] });
    }
    return getJSON(canvas.dataset.src).then((loaded) => {
      data = loaded;
      const any = data.points.some((p) => (campaignWide ? p.geomean !== null : p.speedup !== null));
      if (!any) return noData(canvas, "No data yet: no candidate has been timed beside the baseline.");
      draw();
      if (toggle) toggle.addEventListener("change", draw);
      canvas.dataset.loaded = data.points.length;
    });
  }

  // Per-knob box plots: a thin bar from min to max, a wide one over the quartiles, the median as a point.
  async function knobCharts(box) {
    const data = await getJSON(box.dataset.src);
    if (!data.knobs.length) {
      box.innerHTML = '<p class="muted no-data">No data yet: no knob varied among the timed candidates.</p>';
      return;
    }
    for (const knob of data.knobs) {
      const figure = document.createElement("figure");
      figure.className = "knob";
      figure.innerHTML = `<figcaption><code>${knob.knob}</code></figcaption><div class="chart small-chart"><canvas></canvas></div>`;
      box.appendChild(figure);
      const labels = knob.values.map((v) => `${shorten(v.value)} (${v.n})`);
      const [low, high] = knobRange(knob.values);
      new Chart(figure.querySelector("canvas"), {
        type: "bar",
        data: {
          labels,
          datasets: [
            { label: "min–max", data: knob.values.map((v) => [v.min, v.max]), backgroundColor: "rgba(100,116,139,0.35)", barPercentage: 0.15, grouped: false },
            { label: "quartiles", data: knob.values.map((v) => [v.q1, v.q3]), backgroundColor: data.baseline_colour + "99", barPercentage: 0.6, grouped: false },
            { label: "median", type: "line", data: knob.values.map((v) => v.median), showLine: false, pointStyle: "line", pointRadius: 12, borderWidth: 3, borderColor: "#111827" },
          ],
        },
        options: {
          animation: false,
          maintainAspectRatio: false,
          scales: {
            x: { ticks: { autoSkip: true, maxRotation: 45, font: { size: 10 } } },
            y: { ...ratioAxis("vs " + data.baseline_label, 5, false), min: low, max: high },
          },
          plugins: {
            legend: { display: false },
            unityLine: {},
            tooltip: { callbacks: { title: (items) => `${knob.knob} = ${knob.values[items[0].dataIndex].value}` } },
          },
        },
        plugins: [unityLine],
      });
    }
    box.dataset.loaded = data.knobs.length;
  }

  // The knob axis spans the quartiles (and ×1 when near), not the whiskers: one failed-fast
  // config at ×0.01 would squash every box. Whiskers past the axis are cut at its edge.
  function knobRange(values) {
    let low = Math.min(...values.map((v) => v.q1));
    let high = Math.max(...values.map((v) => v.q3));
    if (low > 0.5) low = Math.min(low, 1);
    if (high < 2) high = Math.max(high, 1);
    return [low / 1.08, high * 1.08];
  }

  function shorten(text) {
    return text.length > 14 ? text.slice(0, 13) + "…" : text;
  }

  // Click a header of table.sortable to sort by it (numbers by data-value).
  function sortable(table) {
    table.querySelectorAll("th[data-sort]").forEach((th, index) => {
      th.style.cursor = "pointer";
      th.addEventListener("click", () => {
        const asc = th.dataset.dir !== "asc";
        table.querySelectorAll("th").forEach((h) => delete h.dataset.dir);
        th.dataset.dir = asc ? "asc" : "desc";
        const column = [...th.parentNode.children].indexOf(th);
        const rows = [...table.tBodies[0].rows];
        const key = (row) => {
          const cell = row.cells[column];
          if (!cell) return null;
          if (th.dataset.sort === "num") {
            const v = parseFloat(cell.dataset.value ?? cell.textContent);
            return Number.isNaN(v) ? null : v;
          }
          return cell.textContent.trim();
        };
        rows.sort((a, b) => {
          const ka = key(a), kb = key(b);
          if (ka === null) return 1;
          if (kb === null) return -1;
          return (ka < kb ? -1 : ka > kb ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach((r) => table.tBodies[0].appendChild(r));
      });
      void index;
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const speedups = document.getElementById("speedups-chart");
    if (speedups) speedupChart(speedups).catch(console.error);
    const form = document.getElementById("heatmap-form");
    const heat = document.getElementById("heatmap-chart");
    if (form && heat) {
      heatmapChart(form, heat).catch(console.error);
      form.addEventListener("change", () => heatmapChart(form, heat).catch(console.error));
    }
    const toggle = document.getElementById("history-gpu");
    const history = document.getElementById("history-chart");
    if (history) historyChart(history, toggle, true).catch(console.error);
    const shapeHistory = document.getElementById("problem-history-chart");
    if (shapeHistory) historyChart(shapeHistory, toggle, false).catch(console.error);
    const knobs = document.getElementById("knobs");
    if (knobs) knobCharts(knobs).catch(console.error);
    document.querySelectorAll("table.sortable").forEach(sortable);
    // each baseline's chart colour beside its column (set here: the CSP allows no inline style)
    document.querySelectorAll(".swatch[data-colour]").forEach((s) => {
      s.style.background = s.dataset.colour;
    });
  });
})();
