// Live progress of the campaign page without reloading: polls the progress endpoint (README,
// "Dashboard JSON API") every few seconds and updates the counts, status and best speedups.
(function () {
  "use strict";
  const box = document.getElementById("progress");
  if (!box) return;
  const FINAL = new Set(["done", "failed", "cancelled"]);
  const pollMs = parseInt(box.dataset.pollMs, 10) || 5000;

  const CLASSES = { faster: "win", tied: "tie", slower: "loss", unmeasured: "unmeasured" };
  const MARKS = { tied: " ≈", unmeasured: " ?" };

  // A same-session ratio the server computed, coloured by its verdict (≈: a tie).
  function speedup(cell, value, verdict) {
    if (value === null || value === undefined) {
      cell.textContent = "—";
      return;
    }
    const span = document.createElement("span");
    span.className = CLASSES[verdict] || "";
    span.textContent = "×" + value.toFixed(3) + (MARKS[verdict] || "");
    cell.dataset.value = String(value);
    cell.replaceChildren(span);
  }

  function apply(data) {
    for (const el of box.querySelectorAll("[data-progress]")) {
      el.textContent = data[el.dataset.progress];
    }
    const status = document.getElementById("campaign-status");
    if (status) {
      status.textContent = data.status_label;
      status.className = "status status-" + (data.gpu_wait ? "waiting" : data.status);
    }
    const times = document.getElementById("times");
    if (times && data.times_display) {
      for (const el of times.querySelectorAll("[data-times]")) {
        el.textContent = data.times_display[el.dataset.times];
      }
      times.hidden = false;
    }
    const banner = document.getElementById("gpu-wait");
    if (banner) {
      banner.hidden = !data.gpu_wait;
      if (data.gpu_wait) {
        banner.querySelector('[data-gpu-wait="text"]').textContent = data.gpu_wait.text;
        banner.querySelector('[data-gpu-wait="queues"]').textContent = data.gpu_wait.queues.join(", ");
        banner.querySelector('[data-gpu-wait="commands"]').textContent = data.gpu_wait.commands.join("\n");
      }
    }
    for (const p of data.problems) {
      const row = document.querySelector(`tr[data-problem="${p.problem}"]`);
      if (!row) continue;
      row.querySelector('[data-field="status_label"]').textContent = p.status_label;
      row.querySelector('[data-field="candidates"]').textContent = p.candidates;
      const waiting = row.querySelector('[data-field="waiting"]');
      if (waiting) waiting.textContent = p.waiting || "—";
      for (const cell of row.querySelectorAll("td[data-baseline]")) {
        const key = cell.dataset.baseline;
        speedup(cell, p.speedups[key], p.verdicts[key]);
      }
    }
    box.dataset.polled = String((parseInt(box.dataset.polled, 10) || 0) + 1);
    document.getElementById("progress-updated").textContent =
      "· updated " + new Date().toLocaleTimeString();
    return !FINAL.has(data.status);
  }

  async function poll() {
    let again = true;
    try {
      const response = await fetch(box.dataset.src, { headers: { Accept: "application/json" } });
      if (response.ok) again = apply(await response.json());
    } catch (error) {
      console.warn("progress:", error);
    }
    if (again) setTimeout(poll, pollMs);
  }

  poll();
})();
