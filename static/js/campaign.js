// Charts of the campaign and shape pages; data from the Dashboard JSON API (see README).
(function () {
  "use strict";
  const COLORS = ["#64748b", "#2f5bd3", "#d97706", "#16a34a"];

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(url + ": " + response.status);
    return response.json();
  }

  async function speedupChart(canvas) {
    const data = await getJSON(canvas.dataset.src);
    new Chart(canvas, {
      type: "bar",
      data: {
        labels: data.shapes.map((s) => s.shape + " " + s.layout.toUpperCase()),
        datasets: data.baselines.map((b, i) => ({
          label: b.label,
          backgroundColor: COLORS[i % COLORS.length],
          data: data.shapes.map((s) => s.best_speedups[b.key]),
        })),
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: { y: { title: { display: true, text: "best speedup (×)" } } },
      },
    });
    canvas.dataset.loaded = data.shapes.length;
  }

  function colour(speedup) {
    if (speedup === null || speedup === undefined) return "#e5e7eb";
    const t = Math.max(-1, Math.min(1, Math.log2(speedup) * 4)); // ±25% spans the scale
    return t >= 0 ? `rgba(22,163,74,${0.25 + 0.75 * t})` : `rgba(220,38,38,${0.25 - 0.75 * t})`;
  }

  let heatmap = null;
  async function heatmapChart(form, canvas) {
    const params = new URLSearchParams(new FormData(form));
    const data = await getJSON(form.dataset.src + "?" + params.toString());
    const points = data.cells.map((c) => ({ x: c.n, y: c.m, speedup: c.speedup }));
    const config = {
      type: "scatter",
      data: {
        datasets: [{
          label: "best speedup over " + data.baseline + " at K=" + data.k,
          data: points,
          pointStyle: "rect",
          pointRadius: 14,
          backgroundColor: points.map((p) => colour(p.speedup)),
        }],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: {
          x: { type: "logarithmic", title: { display: true, text: "N" } },
          y: { type: "logarithmic", title: { display: true, text: "M" } },
        },
        plugins: {
          tooltip: {
            callbacks: {
              label: (ctx) => `M=${ctx.raw.y} N=${ctx.raw.x}: ×${ctx.raw.speedup === null ? "—" : ctx.raw.speedup.toFixed(3)}`,
            },
          },
        },
      },
    };
    if (heatmap) heatmap.destroy();
    heatmap = new Chart(canvas, config);
    canvas.dataset.loaded = points.length;
  }

  async function rewardChart(canvas) {
    const data = await getJSON(canvas.dataset.src);
    new Chart(canvas, {
      type: "line",
      data: {
        labels: data.rewards.map((_, i) => i + 1),
        datasets: [
          { label: "reward", data: data.rewards, showLine: false, pointRadius: 2, backgroundColor: COLORS[1] },
          { label: "best so far", data: data.best_so_far, pointRadius: 0, borderColor: COLORS[3], stepped: true },
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: {
          x: { title: { display: true, text: "candidate" } },
          y: { title: { display: true, text: "reward (log speedup over cuBLASLt autotuned)" } },
        },
      },
    });
    canvas.dataset.loaded = data.rewards.length;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const rewards = document.getElementById("rewards-chart");
    if (rewards) rewardChart(rewards).catch(console.error);
    const bars = document.getElementById("speedups-chart");
    if (bars) speedupChart(bars).catch(console.error);
    const form = document.getElementById("heatmap-form");
    const canvas = document.getElementById("heatmap-chart");
    if (form && canvas) {
      heatmapChart(form, canvas).catch(console.error);
      form.addEventListener("change", () => heatmapChart(form, canvas).catch(console.error));
    }
  });
})();
