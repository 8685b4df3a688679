"use strict";
// The plan page: the recommend answer's candidates as cost against time, the Pareto front filled.
(function () {
  const points = readJson("pareto-data");
  const el = document.getElementById("chart-pareto");
  if (!points || !el) return;
  points.sort((a, b) => a.hours - b.hours);
  const chart = growingChart(el, [
    { label: "Pareto front", color: PALETTE.blue, points: true },
    { label: "dominated", color: PALETTE.orange, points: true, fill: "#ffffff" },
  ], { xLabel: "hours", format: v => v == null ? "" : "$" + v.toFixed(2) });
  chart.set([points.map(p => p.hours), points.map(p => p.pareto ? p.cost_usd : null),
             points.map(p => p.pareto ? null : p.cost_usd)]);
})();
