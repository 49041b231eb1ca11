/* rl-insight UI, plot.js: one uPlot chart as the run page draws it — the trainer metrics (step or time on x) and the
   Prometheus panels (time on x) alike:
   - a compact legend table under the plot: the value under the cursor, last / min / max / mean per series (a click
     on a row hides or shows that series);
   - one crosshair shared by every chart on the same axis (uPlot's cursor sync: one key for steps, one for time), and
     on time the timeline's cursor too (state.onHoverTime);
   - the selected step marked (a line on step axes, its time span shaded on time axes); 24-hour time ticks; integer,
     round step ticks; colours stable per series identity (replica 3 has the same colour in every panel);
   - drag to zoom reports the range (onZoom) instead of keeping it private; a log scale and a full-width toggle.
   Invariant: a plot never owns page state: it reads state.selectedStep and the step marks, and reports clicks and
   zooms to its owner.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { state } from "./api.js";
import { h } from "./dom.js";
import { clock, fmtTick, yRange } from "./format.js";
import { PALETTE, fnv1a } from "./colors.js";

export const SYNC_KEY = { step: "rl-step", time: "rl-time" };
const DASHES = [undefined, [6, 3], [2, 3], [8, 3, 2, 3]];
const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

// A series' colour from its identity, not its position: the last number in its key (replica_3, gpu 3, rank=3) or a
// hash of the key; a colour already used in this chart gets a dash pattern, so no two lines look the same.
export function seriesStyles(keys) {
  const used = new Map();
  return keys.map((key) => {
    const num = /(\d+)(?!.*\d)/.exec(key);
    const color = PALETTE[(num ? +num[1] : fnv1a(key)) % PALETTE.length];
    const n = used.get(color) || 0; used.set(color, n + 1);
    return { color, dash: DASHES[n % DASHES.length] };
  });
}

// The step's span on the time axis, in seconds: from the previous step's end mark to its own (timeline.js).
function stepSpanS(step) {
  const r = state.timeline?.stepRange(step);
  return r ? [r[0] / 1e9, r[1] / 1e9] : null;
}

function markSelectedStep(u, xKind) {
  const s = state.selectedStep;
  u.root.closest(".chart")?.setAttribute("data-selected-step", s ?? "");
  if (s === null || s === undefined) return;
  const span = xKind === "step" ? [s, s] : stepSpanS(s);
  if (!span) return;
  const { left, top, width, height } = u.bbox;
  const x0 = Math.max(left, u.valToPos(span[0], "x", true)), x1 = Math.min(left + width, u.valToPos(span[1], "x", true));
  if (x1 < left || x0 > left + width) return;
  const ctx = u.ctx; ctx.save();
  if (span[0] === span[1]) {
    ctx.strokeStyle = "#d97706"; ctx.lineWidth = 2 * devicePixelRatio; ctx.beginPath(); ctx.moveTo(x0, top); ctx.lineTo(x0, top + height); ctx.stroke();
  } else { ctx.fillStyle = "rgba(217, 119, 6, 0.15)"; ctx.fillRect(x0, top, Math.max(2, x1 - x0), height); }
  ctx.restore();
}

// last / min / max / mean of the points in view (x within [lo, hi]): a zoomed chart's legend describes what it shows
// time ticks in whole seconds and round minutes and hours: a window of a few seconds never labels one second twice
const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
  172800, 604800, 2592000];

const stats = (xs, ys, lo, hi) => {
  let n = 0, sum = 0, min = Infinity, max = -Infinity, last = null;
  for (let i = 0; i < ys.length; i++) {
    const v = ys[i];
    if (xs[i] < lo || xs[i] > hi || v === null || v === undefined || !Number.isFinite(v)) continue;
    n++; sum += v; if (v < min) min = v; if (v > max) max = v; last = v;
  }
  return n ? { last, min, max, mean: sum / n } : { last: null, min: null, max: null, mean: null };
};

// The legend: one row per (non-raw) series, the value under the cursor first; the header cell says where the cursor is.
function legendTable(u, lines, fmt, xKind) {
  const at = h("th", { class: "at" }, "—");
  const rows = [];
  // a unit every value of the table shares ("1.01k tok/s", "552.7 tok/s") is said once, in the corner, so the
  // numbers fit a narrow panel's columns; units that differ by value (ms and s) stay on each number
  let unit = "";
  const cell = (v) => { const t = fmt(v); return unit && t.endsWith(" " + unit) ? t.slice(0, -unit.length - 1) : t; };
  const body = lines.map((l, i) => {
    if (l.raw) return null;
    const cur = h("td", { class: "cur" }, "–");
    const row = h("tr", { "data-series": l.label, title: "click: hide or show this series",
      onclick: () => { const show = !u.series[i + 1].show; u.setSeries(i + 1, { show }); row.classList.toggle("off", !show); } },
      h("td", { class: "name", title: l.label }, h("i", { style: `background:${l.color}` }), l.label), cur,
      ...["last", "min", "max", "mean"].map(k => h("td", { "data-stat": k })));
    rows.push([i + 1, cur, row]);
    return row;
  });
  const table = h("table", { class: "legend-table" },
    h("tr", {}, at, h("th", {}, "cursor"), h("th", {}, "last"), h("th", {}, "min"), h("th", {}, "max"), h("th", {}, "mean")), ...body);
  const corner = () => (unit ? `(${unit})` : "—");
  const update = () => {
    const i = u.cursor.idx;
    const x = i === null || i === undefined ? null : u.data[0][i];
    at.textContent = x === null ? corner() : xKind === "step" ? `step ${x}` : clock(x, true);
    for (const [si, c] of rows) c.textContent = x === null ? "–" : cell(u.data[si][i]);
  };
  const updateStats = () => {
    const lo = u.scales.x.min ?? -Infinity, hi = u.scales.x.max ?? Infinity;
    const all = rows.map(([si]) => stats(u.data[0], u.data[si], lo, hi));
    const texts = all.flatMap(s => ["last", "min", "max", "mean"].map(k => s[k])).filter(v => v !== null).map(v => fmt(v));
    const tail = texts.length ? texts[0].split(" ").slice(1).join(" ") : "";
    unit = tail && !/\d/.test(tail) && texts.every(t => t.endsWith(" " + tail)) ? tail : "";
    rows.forEach(([, , row], n) => {
      for (const td of row.querySelectorAll("td[data-stat]")) { td.textContent = cell(all[n][td.dataset.stat]); td.title = fmt(all[n][td.dataset.stat]); }
    });
    if (u.cursor.idx === null || u.cursor.idx === undefined) at.textContent = corner();
  };
  return { table, update, updateStats };
}

// The y axis as wide as its longest label ("1.16k tok/s" was cut to "00 tok/s" by a fixed 64 px), measured with the
// axis' own font; uPlot asks again after laying the ticks out (cycle), and the first answer stands then.
function yAxisSize(u, values, ai, cycle) {
  const axis = u.axes[ai];
  if (cycle > 1) return axis._size;
  const longest = (values || []).reduce((a, v) => (v && v.length > a.length ? v : a), "");
  let size = (axis.ticks?.size ?? 10) + (axis.gap ?? 5) + 6;
  if (longest) {
    u.ctx.save();
    u.ctx.font = axis.font?.[0] ?? "12px sans-serif";
    size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    u.ctx.restore();
  }
  return Math.max(40, Math.ceil(size));
}

function snapToPoint(u, left, top) {
  const i = left >= 0 ? u.posToIdx(left) : null;
  const x = i === null || i === undefined ? null : u.data[0][i];
  return [x === null || x === undefined ? left : u.valToPos(x, "x"), top];
}

// Build a chart into `box` (a .chart element): lines = [{label, values, color?, dash?, raw?}] over xs.
// ownRange: the chart keeps its own x range and crosshair (a compared run's panels: its times are not the page's).
export function makePlot(box, { xs, lines, xKind, fmt = fmtTick, log = false, onClick = null, onZoom = null, height = 170, ownRange = false }) {
  const key = (l) => l.colorKey ?? l.label;
  const main = lines.filter(l => !l.raw), styles = seriesStyles(main.map(key));
  main.forEach((l, i) => { l.color ??= styles[i].color; if (!("dash" in l)) l.dash = styles[i].dash; });
  for (const l of lines) if (l.raw) { l.color ??= main.find(m => key(m) === key(l))?.color ?? PALETTE[0]; l.dash = undefined; }  // its smoothed twin's
  let legend = null;
  const axisX = xKind === "step"
    ? { incrs: STEP_INCRS, space: 40, values: (u, v) => v.map(x => (x === null ? "" : String(x))) }
    : { space: 64, incrs: TIME_INCRS, values: (u, v, ai, space, incr) => v.map(x => (x === null ? "" : incr >= 86400
        ? new Date(x * 1000).toLocaleDateString([], { month: "short", day: "numeric" }) : clock(x, incr < 60))) };
  const opts = {
    width: Math.max(320, box.clientWidth - 12), height,
    legend: { show: false },
    // the crosshair snaps to the nearest point: every chart on the axis then shows the same step or moment
    cursor: { move: snapToPoint, sync: { key: ownRange ? `own-${Math.random()}` : SYNC_KEY[xKind], setSeries: false }, drag: { x: true, y: false, setScale: false } },
    scales: { x: { time: xKind === "time" }, y: log ? { distr: 3 } : { range: yRange } },
    // (a short chart, the first screen's: ticks closer together, or a range like 0.14-0.97 got none at all)
    axes: [axisX, { values: (u, v) => v.map(x => fmt(x)), size: yAxisSize, space: height < 150 ? 16 : 30 }],
    series: [{ label: xKind }, ...lines.map(l => ({ label: l.label, stroke: l.raw ? `${l.color}55` : l.color, width: l.raw ? 1 : 1.5,
      dash: l.dash, spanGaps: xKind === "step", value: (u, v) => fmt(v) }))],
    hooks: {
      draw: [(u) => markSelectedStep(u, xKind)],
      setScale: [(u, key) => { if (key === "x") legend?.updateStats(); }],
      setCursor: [(u) => { legend?.update(); if (xKind === "time" && !ownRange) state.onHoverTime?.(u.cursor.idx === null ? null : u.posToVal(u.cursor.left, "x"), u); }],
      setSelect: [(u) => {
        if (u.select.width < 4) return;
        const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
        u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
        box.dataset.dragged = String(Date.now());
        onZoom?.(a, b);
      }],
    },
  };
  const plot = new uPlot(opts, [xs, ...lines.map(l => l.values)], box);
  plot.xKind = ownRange ? "own" : xKind;
  legend = legendTable(plot, lines, fmt, xKind);
  legend.updateStats();
  box.append(legend.table);
  // (captured on the root: uPlot's drag handling may stop a click's propagation at its overlay)
  let downX = null;  // where the button went down: a click that ends elsewhere ends a drag, however long its zoom took
  plot.root.addEventListener("mousedown", (e) => { downX = e.clientX; }, true);
  if (onClick) plot.root.addEventListener("click", (e) => {
    if (!plot.over.contains(e.target)) return;
    if (downX !== null && Math.abs(e.clientX - downX) > 3) return;  // the end of a drag, not a click
    if (Date.now() - +(box.dataset.dragged || 0) < 300) return;
    const i = plot.cursor.idx;
    if (i !== null && i !== undefined) onClick(plot.data[0][i]);
  }, true);
  state.charts.push(plot);
  applyViewRange(plot);
  return plot;
}

export function destroyPlot(plot) {
  if (!plot) return;
  plot.root.parentElement?.querySelector(".legend-table")?.remove();
  plot.destroy();
  state.charts = state.charts.filter(p => p !== plot);
}

// The title bar's tools: full width, log scale (only for positive data: it says why not otherwise).
export function chartTools(box, { onLog, canLog }) {
  const wide = h("button", { class: "mini tool", "data-tool": "wide", title: "full width",
    onclick: () => { box.classList.toggle("wide"); wide.textContent = box.classList.contains("wide") ? "narrow" : "wide"; resizeIn(box); } }, "wide");
  const log = h("button", { class: "mini tool", "data-tool": "log", title: "logarithmic y axis",
    onclick: () => { if (!canLog()) { log.title = "log scale needs every value above 0"; log.classList.add("refused"); return; }
      log.classList.toggle("on"); onLog(log.classList.contains("on")); } }, "log");
  return h("span", { class: "tools" }, log, wide);
}

function resizeIn(box) {
  const p = state.charts.find(c => box.contains(c.root));
  if (p) p.setSize({ width: Math.max(320, box.clientWidth - 12), height: p.height });
}

// Redraw every chart's overlay (the selected step moved): no refetch.
export function redrawMarks() { for (const p of state.charts) p.redraw(false, false); }

// One x range for every chart (range.js's current range): steps [a, b] on step charts, seconds [a, b] on time
// charts; null: all the data. Kept across data refreshes (setData would otherwise widen the scale back).
export function applyViewRange(p) {
  if (p.xKind === "own") return;
  const now = state.rangeNow?.() || {};
  const r = p.xKind === "step" ? now.steps : now.secs;
  const xs = p.data[0];
  if (!xs.length) return;
  const [min, max] = r || [xs[0], xs[xs.length - 1]];
  p.setScale("x", { min, max: max > min ? max : min + 1 });
  if (state.hoverSec !== null && state.hoverSec !== undefined) applyHover(p);
}
// The timeline's cursor (state.hoverSec, epoch seconds) on a time chart's crosshair; none when it is off the timeline.
export function applyHover(p) {
  if (p.xKind !== "time") return;
  const sec = state.hoverSec ?? null;
  p.setCursor({ left: sec === null ? -10 : p.valToPos(sec, "x"), top: sec === null ? -10 : p.bbox.height / devicePixelRatio / 2 }, true, false);
}
export function applyViewRangeAll() { for (const p of state.charts) applyViewRange(p); }
