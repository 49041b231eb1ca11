/* rl-insight UI, charts.js: metric charts: families, pinned metrics, one uPlot chart per metric, step or time on x.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, state } from "./api.js";
import { h } from "./dom.js";
import { fmtTick, yRange } from "./format.js";
import { PALETTE, showStep, showTime } from "./timeline.js";

// The trainer's metric families come from the server's panel catalogue (rl_insight/panels.py), in its order; the key
// ones (loss, reward, throughput, timing) start open, the rest collapsed and load when opened.
let FAMILIES = [];
const KEY_FAMILIES = new Set(["pinned"]);
let familiesReady = null;  // asked once, when the first run page draws its charts (after any sign-in)
const loadFamilies = () => familiesReady ??= api("/api/v1/metric-families").then(body => {
  FAMILIES = body.families.map(f => f.id);
  for (const f of body.families) if (f.key) KEY_FAMILIES.add(f.id);
}).catch(() => { familiesReady = null; });  // asked again next time; meanwhile every chart is drawn, under "other"
function familyOf(name) { const f = name.split("_")[0]; return FAMILIES.includes(f) ? f : "other"; }
const PINS_KEY = "rl-insight.pinned-metrics";
const loadPins = () => { try { return new Set(JSON.parse(localStorage.getItem(PINS_KEY) || "[]")); } catch (e) { return new Set(); } };

export class ChartGrid {
  constructor(el, runId, compareIds) {
    this.el = el; this.runId = runId; this.compare = compareIds; this.x = "step"; this.smooth = 0; this.byName = new Map();
    this.filter = ""; this.pins = loadPins(); this.names = [];
  }
  async load() {
    const { metrics } = await api(`/api/v1/runs/${this.runId}/metrics`);
    this.names = [...new Set(metrics.map(m => m.name))].sort();
    const search = h("input", { type: "search", id: "metric-search", placeholder: `search ${this.names.length} metrics`,
      oninput: (e) => { this.filter = e.target.value.trim().toLowerCase().replaceAll("/", "_"); this.applyFilter(); } });
    const bar = h("div", { class: "bar" }, search,
      h("button", { id: "x-step", class: this.x === "step" ? "on" : "", onclick: () => { this.x = "step"; this.rebuild(); } }, "by step"),
      h("button", { id: "x-time", class: this.x === "time" ? "on" : "", onclick: () => { this.x = "time"; this.rebuild(); } }, "by time"),
      h("label", {}, "smoothing ", h("input", { type: "range", id: "smoothing", min: 0, max: 0.98, step: 0.02, value: this.smooth,
        oninput: (e) => { this.smooth = +e.target.value; this.refresh(); } })),
      h("span", { class: "muted" }, "click a point to see that step on the timeline"),
      this.compare.length ? h("span", { class: "muted" }, "comparing ", [this.runId, ...this.compare].map(id => state.runNames?.[id] || `run ${id}`).join(" · ")) : null);
    this.body = h("div");
    this.el.replaceChildren(bar, this.body);
    await this.rebuild();
  }
  destroyPlots() {
    for (const c of this.byName.values()) if (c.plot) { c.plot.destroy(); state.charts = state.charts.filter(p => p !== c.plot); }
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
        const box = h("div", { class: "chart", "data-metric": n, "data-family": f }, h("div", { class: "title" }, pin, n));
        grid.append(box);
        this.byName.set(key, { box, plot: null, name: n, details: det });
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
  }
  async draw(name, c) {
    const runs = await this.fetch(name);
    const xs = new Set(); const lines = [];
    for (const r of runs) for (const s of r.series) {
      const lab = Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(",");
      const runName = runs.length > 1 ? (state.runNames?.[r.run_id] || `run ${r.run_id}`) : "";
      lines.push({ label: [runName, lab].filter(Boolean).join(" ") || name, pts: s.points }); s.points.forEach(p => xs.add(p[0]));
    }
    const xv = [...xs].sort((a, b) => a - b); const idx = new Map(xv.map((x, i) => [x, i]));
    const ys = lines.map(l => { const y = new Array(xv.length).fill(null); let ema = null;
      for (const [x, v] of l.pts) { ema = (ema === null || this.smooth === 0) ? v : this.smooth * ema + (1 - this.smooth) * v; y[idx.get(x)] = ema; } return y; });
    c.box.dataset.points = xv.length;
    const data = [xv, ...ys];
    if (c.plot && c.plot.series.length === lines.length + 1) { c.plot.setData(data); return; }
    if (c.plot) c.plot.destroy();
    const opts = { width: Math.max(320, c.box.clientWidth - 12), height: 170, legend: { show: lines.length > 1 },
      scales: { x: { time: this.x === "time" }, y: { range: yRange } },
      axes: [{ values: this.x === "time" ? undefined : (u, v) => v.map(fmtTick) }, { values: (u, v) => v.map(fmtTick), size: 56 }],
      series: [{ label: this.x }, ...lines.map((l, i) => ({ label: l.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true }))] };
    c.plot = new uPlot(opts, data, c.box); state.charts.push(c.plot);
    c.plot.over.addEventListener("click", () => {
      const i = c.plot.cursor.idx; if (i === null || i === undefined) return;
      const x = c.plot.data[0][i];
      if (this.x === "step") showStep(x); else showTime(x * 1e9);
    });
  }
}
