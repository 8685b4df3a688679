"use strict";
// The job page: one EventSource on /jobs/<id>/events (the executor's Watch); it replays the job's history, then
// follows it live, reconnecting with Last-Event-ID after a drop, and stops at the job's end.
(function () {
  const job = readJson("job-data");
  const loss = growingChart(document.getElementById("chart-loss"),
    [{ label: "loss", color: PALETTE.blue }], { format: v => v == null ? "" : v.toFixed(3) });
  const lr = growingChart(document.getElementById("chart-lr"),
    [{ label: "learning rate", color: PALETTE.orange, dash: [6, 3] }], { format: v => v == null ? "" : v.toExponential(1), ySize: 70 });
  const tps = growingChart(document.getElementById("chart-tps"),
    [{ label: "tokens/s", color: PALETTE.green, dash: [2, 2] }], { format: v => v == null ? "" : v.toFixed(0) });
  const memory = growingChart(document.getElementById("chart-memory"), [
    { label: "measured peak", color: PALETTE.vermillion },
    { label: "predicted", color: PALETTE.black, dash: [8, 4], width: 1 },
    { label: "range low", color: PALETTE.sky, dash: [2, 4], width: 1 },
    { label: "range high", color: PALETTE.sky, dash: [2, 4], width: 1 },
  ], { format: bytesText, ySize: 95 });
  const phase = document.getElementById("phase");
  const step = document.getElementById("step");
  const eta = document.getElementById("eta");
  const status = document.getElementById("live-status");
  const log = document.querySelector("#events tbody");
  const checkpoints = document.getElementById("checkpoints");
  const cancel = document.getElementById("cancel-form");
  let lastStep = 0;
  let shownPhase = job.phase;

  // The header (host, cost, why it waits) as the executor says now: fetched again whenever the phase changes.
  function refreshFacts() {
    fetch(basePath() + "/jobs/" + encodeURIComponent(job.job_id) + "/facts", { credentials: "same-origin" })
      .then(r => r.ok ? r.json() : null)
      .then(f => {
        if (!f) return;
        document.getElementById("host").textContent = f.host;
        document.getElementById("cost").textContent = f.cost;
        const waiting = document.getElementById("waiting");
        waiting.textContent = f.waiting;
        waiting.hidden = document.getElementById("waiting-term").hidden = !f.waiting;
      })
      .catch(() => {});  // the next phase change tries again
  }

  function cell(row, text, css) {
    const td = document.createElement("td");
    td.textContent = text;
    if (css) td.className = css;
    row.appendChild(td);
  }

  function show(e) {
    phase.textContent = e.phase;
    phase.className = "phase phase-" + e.phase;
    if (e.phase !== shownPhase) {
      shownPhase = e.phase;
      refreshFacts();
    }
    if (e.total_steps) step.textContent = e.step + "/" + e.total_steps;
    eta.textContent = e.eta;
    const row = document.createElement("tr");
    cell(row, String(e.sequence), "num");
    cell(row, e.time, "when");
    cell(row, e.phase);
    cell(row, e.step ? String(e.step) : "", "num");
    cell(row, e.message);
    log.appendChild(row);
    const box = log.closest(".log");
    if (box.scrollHeight - box.scrollTop - box.clientHeight < 80) box.scrollTop = box.scrollHeight;
    if (e.checkpoint) {
      const none = checkpoints.querySelector(".none");
      if (none) none.remove();
      const li = document.createElement("li");
      li.textContent = "step " + e.step + ": " + e.checkpoint + " (" + e.time + ")";
      checkpoints.appendChild(li);
    }
    if (e.stored) {  // written on the host (the list) and sealed in the object store (this line) differ while uploading
      document.getElementById("stored-checkpoint").textContent = "step " + e.stored_step + ": " + e.stored + " (" + e.time + ")";
      document.getElementById("stored").hidden = false;
    }
    if (e.metric && e.step > lastStep) {  // only a training event measures a step: others carry no loss or rate
      lastStep = e.step;
      loss.push(e.step, [e.loss]);
      lr.push(e.step, [e.learning_rate]);
      tps.push(e.step, [e.tokens_per_s || null]);
      memory.push(e.step, [e.peak_memory_bytes || null, job.predicted_peak_bytes || null,
                           job.predicted_low_bytes || null, job.predicted_high_bytes || null]);
    }
  }

  const source = new EventSource(basePath() + "/jobs/" + encodeURIComponent(job.job_id) + "/events");
  source.addEventListener("progress", m => show(JSON.parse(m.data)));
  source.addEventListener("end", () => {
    source.close();
    status.textContent = "The job has ended.";
    if (cancel) cancel.remove();
  });
  source.addEventListener("trimmed", m => {
    status.textContent = "Events before #" + JSON.parse(m.data).first_available_sequence + " were trimmed from history.";
  });
  source.addEventListener("failure", m => {
    const f = JSON.parse(m.data);
    status.textContent = "Live updates stopped: " + f.message;
    if (f.code !== "UNAVAILABLE") source.close();
  });
})();
