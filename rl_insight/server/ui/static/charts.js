/* rl-insight UI, charts.js: metric charts: families, pinned metrics, one uPlot chart per metric, step or time on x.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, setUrlParams, state } from "./api.js";
import { h } from "./dom.js";
import { applyViewRange, chartTools, destroyPlot, makePlot, seriesStyles } from "./plot.js";
import { setRange } from "./range.js";
import { showStep, showTime } from "./timeline.js";

// The trainer's metric families come from the server's panel catalogue (rl_insight/semantics/panels.py), in its order; the key
// ones (loss, reward, throughput, timing) start open, the rest collapsed and load when opened.
let FAMILIES = [];
const KEY_FAMILIES = new Set(["pinned"]);
let HEADLINE = [];  // the first screen's charts: [{title, metrics: [names, first logged wins]}]
let familiesReady = null;  // asked once, when the first run page draws its charts (after any sign-in)
const loadFamilies = () => familiesReady ??= api("/api/v1/metric-families").then(body => {
  FAMILIES = body.families.map(f => f.id);
  for (const f of body.families) if (f.key) KEY_FAMILIES.add(f.id);
  HEADLINE = body.headline || [];
}).catch(() => { familiesReady = null; });  // asked again next time; meanwhile every chart is drawn, under "other"
export const headlineList = async () => { await loadFamilies(); return HEADLINE; };
const normal = (q) => q.trim().toLowerCase().replaceAll("/", "_");
// compare: which colour is which run (the same colours in every chart: seriesStyles keys them by the run's position)
function runLegend(ids) {
  const styles = seriesStyles(ids.map((_, i) => `#${i}`));
  return h("span", { class: "run-legend", id: "run-legend" }, "comparing ", ...ids.map((id, i) => h("span", { class: "item", "data-run-id": id },
    h("i", { style: `background:${styles[i].color}` }), state.runNames?.[id] || `run ${id}`)));
}
function familyOf(name) { const f = name.split("_")[0]; return FAMILIES.includes(f) ? f : "other"; }
const PINS_KEY = "rl-insight.pinned-metrics";
const loadPins = () => { try { return new Set(JSON.parse(localStorage.getItem(PINS_KEY) || "[]")); } catch (e) { return new Set(); } };

export class ChartGrid {
  constructor(el, runId, compareIds, query = "") {
    this.el = el; this.runId = runId; this.compare = compareIds; this.x = "step"; this.smooth = 0; this.byName = new Map();
    this.height = 170;  // a chart's plot, px
    this.query = query; this.filter = normal(query); this.pins = loadPins(); this.names = [];
  }
  async load() {
    const { metrics } = await api(`/api/v1/runs/${this.runId}/metrics`);
    this.names = [...new Set(metrics.map(m => m.name))].sort();
    this.logged = new Map(metrics.map(m => [m.name, m.logged || m.name]));  // shown as the job logged it: actor/entropy
    const search = h("input", { type: "search", id: "metric-search", placeholder: `search ${this.names.length} metrics (press /)`,
      value: this.query, oninput: (e) => { this.filter = normal(e.target.value); setUrlParams({ q: e.target.value.trim() }); this.applyFilter(); } });
    const bar = h("div", { class: "bar" }, search,
      h("button", { id: "x-step", class: this.x === "step" ? "on" : "", onclick: () => { this.x = "step"; this.rebuild(); } }, "by step"),
      h("button", { id: "x-time", class: this.x === "time" ? "on" : "", onclick: () => { this.x = "time"; this.rebuild(); } }, "by time"),
      h("label", {}, "smoothing ", h("input", { type: "range", id: "smoothing", min: 0, max: 0.98, step: 0.02, value: this.smooth,
        oninput: (e) => { this.smooth = +e.target.value; this.refresh(); } })),
      h("span", { class: "muted" }, "click a point: select its step · drag: zoom every chart and the timeline to that range"),
      this.compare.length ? runLegend([this.runId, ...this.compare]) : null);
    this.body = h("div");
    this.el.replaceChildren(bar, this.body);
    await this.rebuild();
  }
  destroyPlots() {
    for (const c of this.byName.values()) destroyPlot(c.plot);
    this.byName.clear();
  }
  async rebuild() {
    await loadFamilies();
    this.destroyPlots();
    this.el.querySelectorAll("#x-step, #x-time").forEach(b => b.classList.toggle("on", b.id === `x-${this.x}`));
    const groups = new Map([["pinned", []]]);
    for (const n of this.names) {
      if (this.pins.has(n)) groups.get("pinned").push(n);
      const f = familyOf(n); if (!groups.has(f)) groups.set(f, []); groups.get(f).push(n);
    }
    this.body.replaceChildren();
    for (const f of ["pinned", ...FAMILIES, "other"]) {
      if (!groups.get(f)?.length) continue;
      const grid = h("div", { class: "charts" });
      const det = h("details", { class: "family", "data-family": f, open: KEY_FAMILIES.has(f) ? "" : null },
        h("summary", {}, `${f} (${groups.get(f).length})`), grid);
      det.addEventListener("toggle", () => { if (det.open) this.refresh(); });
      this.body.append(det);
      for (const n of groups.get(f)) {
        const key = f === "pinned" ? `pinned:${n}` : n;
        const pin = h("button", { class: "pin", title: this.pins.has(n) ? "unpin" : "pin to the top",
          onclick: () => { this.pins.has(n) ? this.pins.delete(n) : this.pins.add(n); localStorage.setItem(PINS_KEY, JSON.stringify([...this.pins])); this.rebuild(); } },
          this.pins.has(n) ? "★" : "☆");
        const box = h("div", { class: "chart", "data-metric": n, "data-family": f });
        const c = { box, plot: null, name: n, details: det, log: false };
        box.append(h("div", { class: "title", title: n }, pin, this.logged.get(n) ?? n, chartTools(box, { canLog: () => c.positive,
          onLog: (on) => { c.log = on; this.draw(n, c).catch(() => {}); } })));
        grid.append(box);
        this.byName.set(key, c);
      }
    }
    this.applyFilter();
    await this.refresh();
  }
  applyFilter() {
    for (const c of this.byName.values()) c.box.hidden = !!this.filter && !c.name.toLowerCase().includes(this.filter);
    for (const det of this.body.querySelectorAll("details.family")) {
      const shown = det.querySelectorAll(".chart:not([hidden])").length;
      det.hidden = shown === 0;
      if (this.filter && shown) det.open = true;  // search opens the groups it found something in
    }
  }
  async fetch(name) {
    const ids = [this.runId, ...this.compare];
    if (ids.length === 1) return [await api(`/api/v1/runs/${this.runId}/series?name=${encodeURIComponent(name)}&x=${this.x}&points=800`)];
    return (await api(`/api/v1/series?name=${encodeURIComponent(name)}&runs=${ids.join(",")}&x=${this.x}&points=800`)).runs;
  }
  async refresh() {
    // only charts someone can see: open groups, not filtered out (100 metrics do not cost 100 requests)
    const entries = [...this.byName.values()].filter(c => c.details.open && !c.box.hidden && !c.details.hidden);
    for (let i = 0; i < entries.length; i += 8)  // a few requests at a time
      await Promise.all(entries.slice(i, i + 8).map((c) => this.draw(c.name, c).catch(() => {})));
    // every visible chart has been drawn this many times: what a reader (or a test) waits for
    this.el.dataset.refreshed = String(+(this.el.dataset.refreshed || 0) + 1);
  }
  async draw(name, c) {
    const runs = await this.fetch(name);
    const xs = new Set(); const series = [];
    const names = distinctNames(runs.map(r => state.runNames?.[r.run_id] || `run ${r.run_id}`));
    runs.forEach((r, ri) => { for (const s of r.series) {
      const lab = Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(",");
      const runName = runs.length > 1 ? names[ri] : "";
      // compare: one colour per run (the same in every chart), dashes for a run's several series; a lone series is
      // named by its metric (never "value")
      series.push({ label: [runName, lab].filter(Boolean).join(" ") || (this.logged?.get(name) ?? name), colorKey: runs.length > 1 ? `#${ri}` : undefined, pts: s.points });
      s.points.forEach(p => xs.add(p[0]));
    } });
    const xv = [...xs].sort((a, b) => a - b); const idx = new Map(xv.map((x, i) => [x, i]));
    const column = (pts, smooth) => { const y = new Array(xv.length).fill(null); let ema = null;
      for (const [x, v] of pts) { ema = (ema === null || smooth === 0) ? v : smooth * ema + (1 - smooth) * v; y[idx.get(x)] = ema; } return y; };
    // smoothed: the raw values stay behind, faint (an EMA hides spikes one should still see)
    const lines = series.flatMap(s => [...(this.smooth > 0 ? [{ label: `${s.label} (raw)`, colorKey: s.colorKey ?? s.label, raw: true,
      values: column(s.pts, 0) }] : []), { label: s.label, colorKey: s.colorKey, values: column(s.pts, this.smooth) }]);
    c.box.dataset.points = xv.length;
    c.positive = series.every(s => s.pts.every(p => p[1] === null || p[1] > 0));
    const shape = `${lines.length}|${this.smooth > 0}|${!!c.log}`;
    if (c.plot && c.shape === shape) { c.plot.setData([xv, ...lines.map(l => l.values)]); applyViewRange(c.plot); return; }
    destroyPlot(c.plot);
    c.shape = shape;
    c.plot = makePlot(c.box, { xs: xv, lines, xKind: this.x, log: c.log && c.positive, height: this.height,
      onClick: (x) => (this.x === "step" ? showStep(x) : showTime(x * 1e9)),
      onZoom: (a, b) => (this.x === "step" ? setRange({ steps: [Math.ceil(a), Math.floor(b)] }) : setRange({ secs: [a, b] })) });
  }
}

// Compared runs' names as a legend reads them: the part they share ("rl-insight-demo/demo-sync-2026120") is left
// out (a narrow legend cut every name to that same prefix), the part that differs kept, from its word's start.
export function distinctNames(full) {
  if (full.length < 2) return full;
  let n = 0;
  while (full.every(f => f.length > n && f[n] === full[0][n])) n++;
  const cut = Math.max(0, ...[/[\/_\-. ]/g].flatMap(re => [...full[0].slice(0, n).matchAll(re)].map(m => m.index + 1)));
  return full.map(f => (cut > 0 && f.length > cut ? "…" + f.slice(cut) : f));
}
