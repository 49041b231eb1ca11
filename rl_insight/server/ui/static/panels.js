/* rl-insight UI, panels.js: Prometheus panels of a run page (engines, hardware, TransferQueue), in sections from the server's catalogue.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, every, state } from "./api.js";
import { h } from "./dom.js";
import { fmtUnit } from "./format.js";
import { applyViewRange, chartTools, destroyPlot, makePlot } from "./plot.js";
import { setRange, windowQuery } from "./range.js";
import { showTime } from "./timeline.js";

export class PromSections {
  // idPrefix: a compared run's sections (their ids must not repeat the primary run's); they keep the run's own window
  constructor(el, runId, idPrefix = "") { this.el = el; this.runId = runId; this.prefix = idPrefix; this.boxes = new Map(); this.available = []; }
  async load() {
    const d = await api(`/api/v1/runs/${this.runId}/panels`);
    this.el.replaceChildren();
    const promOk = d.prometheus.state === "ok";
    if (!promOk) {
      this.el.append(h("p", { class: "muted", id: this.prefix ? null : "prom-unavailable" }, `No Prometheus data: ${d.prometheus.message}`));
    }
    for (const sec of d.sections) {
      const grid = h("div", { class: "charts" });
      // without Prometheus the cause is Prometheus, not the engine's settings: the registered targets are not scraped
      const body = sec.available ? grid : promOk ? h("p", { class: "muted enable-hint" }, "No data for this run. ", sec.enable)
        : h("p", { class: "muted enable-hint" }, "No data: no Prometheus scrapes this run's targets (see above); the engine's own settings are not the cause.");
      this.el.append(h("details", { class: "family prom", id: `${this.prefix}sec-${sec.id}`, "data-section": sec.id, "data-available": sec.available ? "1" : "0", open: "" },
        h("summary", {}, sec.title, sec.available ? "" : " (no data)"), body));
      if (!sec.available) continue;
      this.available.push(sec.id);
      for (const p of sec.panels) {
        const box = h("div", { class: "chart", "data-panel": p.id, title: p.description || "" });
        const c = { box, plot: null, unit: p.unit, log: false, last: null };
        box.append(h("div", { class: "title" }, p.title, chartTools(box, { canLog: () => c.positive,
          onLog: (on) => { c.log = on; if (c.last) this.draw(c, c.last); } })));
        grid.append(box); this.boxes.set(p.id, c);
      }
    }
    await this.refresh();
  }
  async refresh() {
    await Promise.all(this.available.map(async (id) => {
      const d = await api(`/api/v1/runs/${this.runId}/panels/${id}${this.prefix ? "" : windowQuery()}`).catch(() => null);
      if (!d) return;
      for (const p of d.panels) { const c = this.boxes.get(p.id); if (c) this.draw(c, p); }
    }));
    // every panel has been drawn (or its section failed) this many times: what a reader (or a test) waits for
    this.el.dataset.refreshed = String(+(this.el.dataset.refreshed || 0) + 1);
  }
  draw(c, p) {
    c.last = p;
    const xs = new Set(); p.series.forEach(s => s.points.forEach(pt => xs.add(pt[0])));
    const xv = [...xs].sort((a, b) => a - b); const idx = new Map(xv.map((x, i) => [x, i]));
    const ys = p.series.map(s => { const y = new Array(xv.length).fill(null); for (const [t, v] of s.points) y[idx.get(t)] = v; return y; });
    c.box.dataset.series = p.series.length; c.box.dataset.points = xv.length;
    c.box.dataset.last = JSON.stringify(p.series.map(s => [s.name, [...s.points].reverse().find(pt => pt[1] !== null)?.[1] ?? null]));
    if (p.error) c.box.dataset.error = p.error;
    if (!p.series.length) { destroyPlot(c.plot); c.plot = null; c.shape = null;
      if (!c.box.querySelector(".empty")) c.box.append(h("div", { class: "muted empty" }, "no series in this window")); return; }
    c.box.querySelector(".empty")?.remove();
    const data = [xv, ...ys];
    c.positive = ys.every(y => y.every(v => v === null || v > 0));
    const shape = `${p.series.length}|${!!c.log}`;
    if (c.plot && c.shape === shape) { c.plot.setData(data); applyViewRange(c.plot); return; }
    destroyPlot(c.plot);
    c.shape = shape;
    const unit = c.unit;
    c.plot = makePlot(c.box, { xs: xv, lines: p.series.map((s, i) => ({ label: s.name, values: ys[i] })), xKind: "time",
      fmt: (v) => fmtUnit(unit, v), log: c.log && c.positive,
      ownRange: !!this.prefix, onClick: this.prefix ? null : (t) => showTime(t * 1e9),
      onZoom: this.prefix ? null : (a, b) => setRange({ secs: [a, b] }) });
  }
}
