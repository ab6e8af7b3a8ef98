// The launch form's live count of distinct shapes and GPU-time estimate. The server checks
// everything again (webapp/campaigns/forms.py); this only previews.
(function () {
  "use strict";
  const form = document.getElementById("launch-form");
  if (!form) return;
  const presets = JSON.parse(document.getElementById("presets").textContent);
  const perCandidate = parseFloat(form.dataset.secondsPerCandidate);
  const maxShapes = parseInt(form.dataset.maxShapes, 10);
  const field = (name) => form.elements[name];

  function values(text) {
    const out = [];
    for (const item of text.split(/[\s,;]+/)) {
      if (!item) continue;
      if (!/^[0-9]+$/.test(item) || parseInt(item, 10) < 1) return null; // the server explains
      out.push(parseInt(item, 10));
    }
    return out;
  }

  function shapes() {
    const set = new Set();
    for (const line of field("shapes").value.split("\n")) {
      const m = line.trim().toLowerCase().match(/^([0-9]+)x([0-9]+)x([0-9]+)$/);
      if (m) set.add(`${+m[1]}x${+m[2]}x${+m[3]}`);
    }
    const [ms, ns, ks] = ["grid_m", "grid_n", "grid_k"].map((f) => values(field(f).value) || []);
    for (const m of ms) for (const n of ns) for (const k of ks) set.add(`${m}x${n}x${k}`);
    const preset = presets[field("preset").value];
    if (preset && preset.grid) {
      const v = preset.grid;
      for (const m of v) for (const n of v) for (const k of v) set.add(`${m}x${n}x${k}`);
    } else if (preset && preset.nk) {
      for (const m of values(field("tokens").value) || []) {
        for (const [n, k] of preset.nk) set.add(`${m}x${n}x${k}`);
      }
    }
    return set.size;
  }

  function duration(s) {
    if (s < 90) return `${Math.round(s)} s`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min`;
    if (s < 48 * 3600) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} days`;
  }

  function update() {
    const count = shapes();
    const budget = parseInt(field("budget_per_shape").value, 10);
    const countText = `${count} shape${count === 1 ? "" : "s"}`;
    document.getElementById("shape-count").textContent =
      count > maxShapes ? `${countText} (over the limit of ${maxShapes})` : countText;
    document.getElementById("gpu-estimate").textContent =
      count && budget > 0 ? duration(count * budget * perCandidate) : "—";
  }

  // Before launch: say when no online worker serves the chosen pool's GPU queue.
  const offline = JSON.parse(document.getElementById("offline-pools").textContent);
  function warnOffline() {
    const queue = offline[field("gpu_pool").value];
    document.getElementById("no-worker").hidden = queue === undefined;
    if (queue !== undefined) document.getElementById("no-worker-queue").textContent = queue;
  }

  form.addEventListener("change", warnOffline);
  warnOffline();
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
})();
