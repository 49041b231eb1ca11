/* rl-insight UI, panels.js: Prometheus panels of a run page (engines, hardware, TransferQueue), in sections from the server's catalogue.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, every, state } from "./api.js";
import { h } from "./dom.js";
import { fmtUnit, yRange } from "./format.js";
import { PALETTE } from "./timeline.js";

export class PromSections {
  constructor(el, runId) { this.el = el; this.runId = runId; this.boxes = new Map(); this.available = []; }
  async load() {
    const d = await api(`/api/v1/runs/${this.runId}/panels`);
    this.el.replaceChildren();
    if (d.prometheus.state !== "ok") {
      this.el.append(h("p", { class: "muted", id: "prom-unavailable" }, `No Prometheus data: ${d.prometheus.message}`));
    }
    for (const sec of d.sections) {
      const grid = h("div", { class: "charts" });
      const body = sec.available ? grid : h("p", { class: "muted enable-hint" }, "No data for this run. ", sec.enable);
      this.el.append(h("details", { class: "family prom", id: `sec-${sec.id}`, "data-available": sec.available ? "1" : "0", open: "" },
        h("summary", {}, sec.title, sec.available ? "" : " (no data)"), body));
      if (!sec.available) continue;
      this.available.push(sec.id);
      for (const p of sec.panels) {
        const box = h("div", { class: "chart", "data-panel": p.id, title: p.description || "" }, h("div", { class: "title" }, p.title));
        grid.append(box); this.boxes.set(p.id, { box, plot: null, unit: p.unit });
      }
    }
    await this.refresh();
  }
  async refresh() {
    await Promise.all(this.available.map(async (id) => {
      const d = await api(`/api/v1/runs/${this.runId}/panels/${id}`).catch(() => null);
      if (!d) return;
      for (const p of d.panels) { const c = this.boxes.get(p.id); if (c) this.draw(c, p); }
    }));
    // every panel has been drawn (or its section failed) this many times: what a reader (or a test) waits for
    this.el.dataset.refreshed = String(+(this.el.dataset.refreshed || 0) + 1);
  }
  draw(c, p) {
    const xs = new Set(); p.series.forEach(s => s.points.forEach(pt => xs.add(pt[0])));
    const xv = [...xs].sort((a, b) => a - b); const idx = new Map(xv.map((x, i) => [x, i]));
    const ys = p.series.map(s => { const y = new Array(xv.length).fill(null); for (const [t, v] of s.points) y[idx.get(t)] = v; return y; });
    c.box.dataset.series = p.series.length; c.box.dataset.points = xv.length;
    c.box.dataset.last = JSON.stringify(p.series.map(s => [s.name, [...s.points].reverse().find(pt => pt[1] !== null)?.[1] ?? null]));
    if (p.error) c.box.dataset.error = p.error;
    if (!p.series.length) { if (c.plot) { c.plot.destroy(); c.plot = null; }
      if (!c.box.querySelector(".empty")) c.box.append(h("div", { class: "muted empty" }, "no series in this window")); return; }
    c.box.querySelector(".empty")?.remove();
    const data = [xv, ...ys];
    if (c.plot && c.plot.series.length === p.series.length + 1) { c.plot.setData(data); return; }
    if (c.plot) c.plot.destroy();
    const unit = c.unit;
    const opts = { width: Math.max(320, c.box.clientWidth - 12), height: 170, legend: { show: p.series.length <= 12 },
      scales: { x: { time: true }, y: { range: yRange } },
      axes: [{}, { values: (u, v) => v.map(x => fmtUnit(unit, x)), size: 70 }],
      series: [{ label: "time" }, ...p.series.map((s, i) => ({ label: s.name, stroke: PALETTE[i % PALETTE.length], width: 1.5,
        spanGaps: false, value: (u, v) => fmtUnit(unit, v) }))] };
    c.plot = new uPlot(opts, data, c.box); state.charts.push(c.plot);
  }
}
