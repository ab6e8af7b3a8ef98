// The launch form's live count of distinct shapes and GPU-time estimate. The server checks
// everything again (webapp/campaigns/forms.py); this only previews, counting only the shapes the
// server would accept (engine.problem's limits, sent in the form's data attributes).
(function () {
  "use strict";

  function values(text) {
    const out = [];
    for (const item of text.split(/[\s,;]+/)) {
      if (!item) continue;
      if (!/^[0-9]+$/.test(item) || parseInt(item, 10) < 1) return null; // the server explains
      out.push(parseInt(item, 10));
    }
    return out;
  }

  // engine.problem.Problem: every dimension in 1..maxDim, N and K multiples of align, and A, B
  // and C (fp16) within maxOperandBytes.
  function valid(m, n, k, limits) {
    if (![m, n, k].every((d) => d >= 1 && d <= limits.maxDim)) return false;
    if (n % limits.align || k % limits.align) return false;
    return 2 * (m * k + k * n + m * n) <= limits.maxOperandBytes;
  }

  // {count: distinct valid shapes, invalid: lines and grid combinations the server would refuse}
  function countShapes(input, presets, limits) {
    const set = new Set();
    let invalid = 0;
    const add = (m, n, k) => {
      if (valid(m, n, k, limits)) set.add(`${m}x${n}x${k}`);
      else invalid += 1;
    };
    for (const line of input.shapes.split("\n")) {
      const text = line.trim().toLowerCase();
      if (!text) continue;
      const m = text.match(/^([0-9]+)x([0-9]+)x([0-9]+)$/);
      if (m) add(+m[1], +m[2], +m[3]);
      else invalid += 1;
    }
    const axes = [input.grid_m, input.grid_n, input.grid_k].map((t) => values(t || ""));
    if (axes.some((a) => a === null)) invalid += 1;
    const [ms, ns, ks] = axes.map((a) => a || []);
    for (const m of ms) for (const n of ns) for (const k of ks) add(m, n, k);
    const preset = presets[input.preset];
    if (preset && preset.grid) {
      const v = preset.grid;
      for (const m of v) for (const n of v) for (const k of v) add(m, n, k);
    } else if (preset && preset.nk) {
      for (const m of values(input.tokens || "") || []) {
        for (const [n, k] of preset.nk) add(m, n, k);
      }
    }
    return { count: set.size, invalid };
  }

  if (typeof window !== "undefined") window.gemmforgeCountShapes = countShapes; // for the tests
  const form = typeof document !== "undefined" && document.getElementById("launch-form");
  if (!form) return;
  const presets = JSON.parse(document.getElementById("presets").textContent);
  const perCandidate = parseFloat(form.dataset.secondsPerCandidate);
  const maxShapes = parseInt(form.dataset.maxShapes, 10);
  const limits = {
    maxDim: parseInt(form.dataset.maxDim, 10),
    align: parseInt(form.dataset.align, 10),
    maxOperandBytes: parseFloat(form.dataset.maxOperandBytes),
  };
  const field = (name) => form.elements[name];

  function duration(s) {
    if (s < 90) return `${Math.round(s)} s`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min`;
    if (s < 48 * 3600) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} days`;
  }

  function update() {
    const input = {};
    for (const name of ["shapes", "grid_m", "grid_n", "grid_k", "preset", "tokens"]) {
      input[name] = field(name).value;
    }
    const { count, invalid } = countShapes(input, presets, limits);
    const budget = parseInt(field("budget_per_shape").value, 10);
    let text = `${count} shape${count === 1 ? "" : "s"}`;
    if (count > maxShapes) text += ` (over the limit of ${maxShapes})`;
    if (invalid) text += ` · ${invalid} not counted (not a valid shape: Launch says why)`;
    document.getElementById("shape-count").textContent = text;
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
