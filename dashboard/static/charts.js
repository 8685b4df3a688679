"use strict";
// Shared by the pages' charts (uPlot, shipped in vendor/). Okabe–Ito colours: told apart with every common
// colour-vision deficiency; each series also has its own dash, so no chart relies on colour alone.
const PALETTE = { blue: "#0072B2", orange: "#E69F00", green: "#009E73", purple: "#CC79A7", vermillion: "#D55E00",
                  sky: "#56B4E9", black: "#000000" };

function basePath() {
  return document.querySelector('meta[name="base-path"]').content;
}

function readJson(id) {
  const el = document.getElementById(id);
  return el ? JSON.parse(el.textContent) : null;
}

function bytesText(n) {
  if (n == null) return "";
  const units = [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
  for (const [unit, scale] of units) if (Math.abs(n) >= scale) return (n / scale).toFixed(2) + " " + unit;
  return n.toFixed(0) + " B";
}

// A chart whose x grows (steps, or seconds when opts.time): push() adds a point and redraws; el.dataset.points
// counts the points drawn (what the browser tests read).
function growingChart(el, series, opts) {
  const data = [[], ...series.map(() => [])];
  const width = Math.max(300, el.clientWidth || 480);
  const yFormat = opts.format ? (u, vals) => vals.map(v => opts.format(v)) : undefined;
  const chart = new uPlot({
    width: width, height: 220,
    scales: { x: { time: !!opts.time }, y: opts.yRange ? { range: opts.yRange } : {} },
    axes: [{ label: opts.xLabel || "step" }, { values: yFormat, size: opts.ySize || 60 }],
    series: [{ label: opts.xLabel || "step" },
             ...series.map(s => ({ label: s.label, stroke: s.color, width: s.width || 2, dash: s.dash,
                                    points: { show: !!s.points, size: 7, fill: s.fill || s.color },
                                    paths: s.points ? () => null : undefined, spanGaps: true,
                                    value: opts.format ? (u, v) => opts.format(v) : undefined }))],
  }, data, el);
  return {
    push(x, ys) {
      data[0].push(x);
      ys.forEach((y, i) => data[i + 1].push(y));
      chart.setData(data);
      el.dataset.points = String(data[0].length);
      const first = data[1].filter(v => v != null);
      if (first.length) el.dataset.minY = String(Math.min(...first));  // what the browser tests read
    },
    set(columns) {
      columns.forEach((col, i) => { data[i] = col; });
      chart.setData(data);
      if (opts.xMinSpan) {  // the span of the data held (at least xMinSpan, ending at its newest point or now)
        const last = data[0].length ? data[0][data[0].length - 1] : Date.now() / 1000;
        const first = data[0].length ? data[0][0] : last;
        const min = Math.min(first, last - opts.xMinSpan);
        chart.setScale("x", { min: min, max: last });
        el.dataset.xSpan = String(last - min);  // what the browser tests read
      }
      el.dataset.points = String(data[0].length);
    },
  };
}
