"use strict";
// The fleet page: the sampled utilisation chart, and the page drawn again while it is visible.
(function () {
  const u = readJson("utilisation-data");
  const colors = [PALETTE.blue, PALETTE.orange, PALETTE.green, PALETTE.purple, PALETTE.vermillion, PALETTE.sky];
  const dashes = [undefined, [6, 3], [2, 2], [8, 2, 2, 2], [1, 3], [10, 5]];
  const names = Object.keys(u.classes);
  const chart = growingChart(document.getElementById("chart-utilisation"),
    names.map((n, i) => ({ label: n, color: colors[i % colors.length], dash: dashes[i % dashes.length],
                           points: u.time_s.length < 2 })),
    { time: true, xLabel: "time", format: v => v == null ? "" : Math.round(v * 100) + "%", yRange: [0, 1],
      xMinSpan: u.sample_interval_s * 5 });
  chart.set([u.time_s, ...names.map(n => u.classes[n])]);
  const refresh = Number(document.querySelector('meta[name="refresh-s"]').content) * 1000;
  setInterval(() => { if (document.visibilityState === "visible") location.reload(); }, refresh);
})();
