/* rl-insight UI, timeline.js: the RL state timeline: lanes x time, stage colours, step marks, zoom; and `showStep`, the jump other parts use.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, setUrlParams, state } from "./api.js";
import { $, h } from "./dom.js";
import { PLUMBING, fmtDur, roundTicks, timeTicks } from "./format.js";
import { applyHover, redrawMarks } from "./plot.js";
import { setRange } from "./range.js";
import { colorOf } from "./colors.js";


export class Timeline {
  updateLegend() {
    const names = [...new Set(this.data.spans.map(sp => sp[2]))].sort();
    const key = names.join("\u0000");
    if (key === this._legendKey) return;
    this._legendKey = key;
    this.legend.replaceChildren(...names.map(n => h("span", { class: "item", "data-stage": n, "data-color": colorOf(n) },
      h("i", { style: `background:${colorOf(n)}` }), n)));
  }
  constructor(el, runId, follow) {
    this.el = el; this.runId = runId; this.follow = follow; this.gutter = 120; this.rowH = 18; this.axisH = 22;
    this.pageSize = 64; this.page = 0; this.allLanes = null; this.laneFilter = "";
    const main = el.id === "timeline";  // compared runs' timelines carry no ids (they would repeat)
    const pid = (id) => main ? id : null;
    this.pid = pid;
    this.pager = h("div", { class: "bar", id: pid("lane-pager") });
    this.filterBox = h("input", { type: "search", class: "lane-filter", id: pid("lane-filter"), placeholder: "filter lanes: rank_1, replica_",
      oninput: () => { this.laneFilter = this.filterBox.value; this.page = 0; this.rememberLanes(); clearTimeout(this.ft); this.hideTip();
        this.ft = setTimeout(() => this.load().catch(() => {}), 200); } });
    this.el.before(this.pager);
    this.canvas = h("canvas"); this.el.append(this.canvas);
    this.legend = h("div", { class: "legend", id: pid("timeline-legend") }); this.el.after(this.legend);
    this.data = { lanes: [], spans: [] }; this.view = null; this.detailCache = new Map();
    this.selected = new Set(); this.onSelect = null;  // lanes chosen for a profile request (click their names)
    this.windows = [];  // profiled windows drawn over their lanes: [{lanes, start_ns, end_ns, id}]
    this.snapshot = null;  // an open stack snapshot: {id, t_ns, odd: [lanes]} (stacks.js)
    this.canvas.addEventListener("wheel", (e) => { e.preventDefault(); this.zoom(e.offsetX, e.deltaY > 0 ? 1.25 : 0.8); }, { passive: false });
    this.canvas.addEventListener("mousedown", (e) => { this.drag = { x: e.clientX, from: this.view[0], to: this.view[1] }; });
    window.addEventListener("mouseup", (e) => { if (this.drag) { const moved = Math.abs(e.clientX - this.drag.x) > 2; this.drag = null;
      this.fetchSoon(); if (moved) this.reportView(); } });
    window.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => { $("#tooltip").hidden = true; this.crosshair(null); });
    this.canvas.addEventListener("click", (e) => {
      if (e.offsetY > this.axisH + 14) return;  // the step band under the time axis
      // the nearest step mark within 30 px (marks can be closer than that when many steps are in view)
      const hit = (this.stepHits || []).filter(([x]) => Math.abs(x - e.offsetX) < 30)
        .sort((p, q) => Math.abs(p[0] - e.offsetX) - Math.abs(q[0] - e.offsetX))[0];
      if (hit) (state.timelines?.includes(this) ? showStep(hit[1]) : this.zoomToStep(hit[1]));  // compare: every run at that step
    });
    this.canvas.addEventListener("dblclick", () => {
      this.view = null; this.follow = true; this.load();
      if (state.timeline === this) setRange(null, { source: this });
    });
  }
  width() { return Math.max(300, this.el.clientWidth); }
  async pageLanes() {
    // Many lanes (1,000 ranks): show and fetch one page at a time, like Grafana's perPage.
    if (this.allLanes === null || this.follow) {
      const all = (await api(`/api/v1/runs/${this.runId}/lanes`)).lanes.map(l => l.lane);
      // agent-loop trajectory lanes (one per trajectory: thousands) are the trajectories section's, not the timeline's
      this.allLanes = all.filter(l => !l.startsWith("experiment="));
      this.hiddenLanes = all.length - this.allLanes.length;
    }
    // the lane filter: names containing any of its comma-separated parts (rank_1, replica_ …), case-insensitive
    const parts = this.laneFilter.toLowerCase().split(",").map(x => x.trim()).filter(Boolean);
    const shown = parts.length ? this.allLanes.filter(l => parts.some(p => l.toLowerCase().includes(p))) : this.allLanes;
    const n = shown.length;
    const hidden = this.hiddenLanes ? h("a", { href: "#", id: this.pid("lanes-hidden"), class: "muted", onclick: (e) => { e.preventDefault();
      document.getElementById("trajectories-h")?.scrollIntoView(); } }, ` ${this.hiddenLanes} agent-loop trajectory lanes: see the trajectories`) : null;
    const note = parts.length ? h("span", { class: "muted", id: this.pid("lanes-matched") }, `${n} of ${this.allLanes.length} lanes match`) : null;
    if (n <= this.pageSize) {
      this.pager.replaceChildren(this.filterBox, ...[note, hidden].filter(Boolean));
      return parts.length || (this.hiddenLanes && n) ? shown : null;  // null: every lane (the server's default)
    }
    const pages = Math.ceil(n / this.pageSize); this.page = Math.max(0, Math.min(this.page, pages - 1));
    const a = this.page * this.pageSize, b = Math.min(n, a + this.pageSize);
    const go = (d) => { this.page = Math.max(0, Math.min(pages - 1, this.page + d)); this.rememberLanes(); this.load(); };
    this.pager.replaceChildren(this.filterBox, h("button", { id: this.pid("lanes-prev"), onclick: () => go(-1), disabled: this.page === 0 ? "" : null }, "◀"),
      h("span", { id: this.pid("lanes-page") }, `lanes ${a + 1}–${b} of ${n}`),
      h("button", { id: this.pid("lanes-next"), onclick: () => go(1), disabled: this.page === pages - 1 ? "" : null }, "▶"),
      ...[note, hidden].filter(Boolean));
    return shown.slice(a, b);
  }
  // the main timeline's lane filter and page live in the address (`lanes=`, `lane_page=`)
  rememberLanes() { if (state.timeline === this) setUrlParams({ lanes: this.laneFilter || null, lane_page: this.page || null }); }
  async load() {
    const w = this.width() - this.gutter;
    const page = await this.pageLanes();
    if (page && !page.length) {  // the filter matches no lane: nothing to ask for (an empty list would mean all)
      this.data = { lanes: [], spans: [], from_ns: this.view?.[0] ?? 0, to_ns: this.view?.[1] ?? 1 };
      if (!this.view) return;
      this.draw(); return;
    }
    let q = page ? `&lanes=${encodeURIComponent(page.join(","))}` : "";
    if (this.view && !this.follow) q += `&from_ns=${Math.round(this.view[0])}&to_ns=${Math.round(this.view[1])}`;
    else if (this.view) { const span = this.view[1] - this.view[0]; const now = Date.now() * 1e6; q += `&from_ns=${Math.round(now - span)}&to_ns=${Math.round(now)}`; }
    // the first view (the whole run) is merged by the server to the view's width (px): one answer, never the whole
    // run at full resolution first
    const res = this.view ? `resolution_ns=${Math.max(0, Math.floor((this.view[1] - this.view[0]) / w))}` : `px=${Math.floor(w)}`;
    const d = await api(`/api/v1/runs/${this.runId}/spans?${res}${q}`);
    if (!this.view) this.view = [d.from_ns, d.to_ns];
    else if (this.follow) this.view = [d.from_ns, d.to_ns];
    this.data = d;
    // spans whose clocks say they began long before the run (a node at 1970) are not in the default window: say so
    if (d.left_out) this.el.dataset.leftOut = d.left_out.spans;
    if (d.left_out && !this.leftOutNote) {
      this.leftOutNote = h("p", { class: "muted", id: this.pid("timeline-left-out") }, `${d.left_out.why}.`);
      this.pager.after(this.leftOutNote);
    }
    await this.loadSteps();
    this.draw();
  }
  async loadSteps() {
    // step boundaries: the first time each value of the step metric was seen
    if (this.stepMarks && !this.follow && this._stepsLoadedAt && Date.now() - this._stepsLoadedAt < 30000) return;
    try {
      const r = await api(`/api/v1/runs/${this.runId}/series?name=training_global_step&x=time&agg=none&points=20000`);
      const first = new Map();
      for (const s of r.series) for (const [ts, step] of s.points) if (!first.has(step) || first.get(step) > ts) first.set(step, ts);
      this.stepMarks = [...first.entries()].map(([step, ts]) => [step, ts * 1e9]).sort((a, b) => a[1] - b[1]);
    } catch (e) { this.stepMarks = []; }
    this._stepsLoadedAt = Date.now();
  }
  async zoomToStep(step) {
    let i = (this.stepMarks || []).findIndex(m => m[0] === step);
    if (i < 0) {  // a step newer than the marks this view fetched (the insight cards can be ahead of it): fetch them now
      this._stepsLoadedAt = 0;
      await this.loadSteps();
      i = (this.stepMarks || []).findIndex(m => m[0] === step);
      if (i < 0 && !this.isRunning(step)) return;
    }
    const [start, end] = this.stepRange(step);
    this.view = [start, end]; this.follow = false; this.draw(); this.fetchSoon();
  }
  // A step's span in ns: its metrics are logged when it ends, so step N runs from the previous mark to its own.
  // The step that runs now (one after the last mark; a hang's link names it): from the last mark to now.
  stepRange(step) {
    const marks = this.stepMarks || [], i = marks.findIndex(m => m[0] === step);
    if (i < 0 && this.isRunning(step)) return [marks[marks.length - 1][1], Math.max(Date.now() * 1e6, this.data?.to_ns || 0)];
    if (i < 0) return null;
    return [i > 0 ? marks[i - 1][1] : Math.min(this.data.from_ns ?? marks[i][1], marks[i][1]), marks[i][1]];
  }
  // The page's range moved (range.js): show that window (null: the whole run), following the end when asked.
  // Drawn at once over the spans it has, as a zoom is: the window does not wait on (or, if it fails, stay behind) the
  // fetch of its spans, which fill in when they come.
  setWindow(ns, follow) {
    this.view = ns; this.follow = follow;
    if (ns && this.data) this.draw();
    return this.load().catch(() => {});  // (settles when the window's spans are drawn: the range's loading hint)
  }
  // A zoom or pan by the user: the page's range follows (the main timeline only: a compared run has its own times).
  reportView() {
    clearTimeout(this.rt);
    if (state.timeline !== this) return;
    this.rt = setTimeout(() => setRange({ secs: [this.view[0] / 1e9, this.view[1] / 1e9] }, { source: this }), 250);
  }
  zoomBy(factor) { this.zoom(this.gutter + (this.width() - this.gutter) / 2, factor); }
  panBy(fraction) {
    const d = (this.view[1] - this.view[0]) * fraction;
    this.view = [this.view[0] + d, this.view[1] + d]; this.follow = false; this.draw(); this.fetchSoon(); this.reportView();
  }
  // A chart's cursor at this moment (epoch seconds; null: none): a thin line over every lane.
  setHover(sec) {
    if (!this.hoverLine) { this.hoverLine = h("div", { class: "hover-line" }); this.el.append(this.hoverLine); }
    const [a, b] = this.view || [0, 0], ns = sec === null ? null : sec * 1e9;
    const inside = ns !== null && ns >= a && ns <= b && b > a;
    this.hoverLine.hidden = !inside;
    if (inside) this.hoverLine.style.left = `${this.gutter + (ns - a) / (b - a) * (this.width() - this.gutter)}px`;
    this.el.dataset.hoverNs = inside ? String(Math.round(ns)) : "";
  }
  fetchSoon() { clearTimeout(this.t); this.t = setTimeout(() => this.load().catch(() => {}), 120); }  // (a failure: the banner)
  zoom(px, factor) {
    const [a, b] = this.view; const x = a + (b - a) * Math.max(0, px - this.gutter) / (this.width() - this.gutter);
    this.view = [Math.round(x - (x - a) * factor), Math.round(x + (b - x) * factor)]; this.follow = false; this.draw(); this.fetchSoon();
    this.reportView();
  }
  layout() {
    const rows = []; let prev = null;
    this.data.lanes.forEach((lane, i) => {
      const prefix = (/^(.+?)(?:[_-]\d+)?$/.exec(lane) || [null, lane])[1];
      if (prefix !== prev) { rows.push({ group: prefix }); prev = prefix; }
      rows.push({ lane, index: i });
    });
    return rows;
  }
  draw() {
    const rows = this.layout(); const dpr = window.devicePixelRatio || 1;
    const W = this.width(), H = this.axisH + rows.length * this.rowH + 4;
    this.canvas.width = W * dpr; this.canvas.height = H * dpr; this.canvas.style.width = `${W}px`; this.canvas.style.height = `${H}px`;
    const ctx = this.canvas.getContext("2d"); ctx.scale(dpr, dpr); ctx.clearRect(0, 0, W, H);
    const [a, b] = this.view; const plotW = W - this.gutter; const xOf = (t) => this.gutter + (t - a) / (b - a) * plotW;
    // other lanes now (a filter, a page, a lane that came): a tooltip of the lanes drawn before no longer points at its span
    const lanesNow = this.data.lanes.join("\n");
    if (this.drawnLanes !== undefined && lanesNow !== this.drawnLanes) this.hideTip();
    this.drawnLanes = lanesNow;
    this.el.dataset.fromNs = a; this.el.dataset.toNs = b; this.el.dataset.laneCount = this.data.lanes.length; this.el.dataset.spanCount = this.data.spans.length;
    // axis
    ctx.fillStyle = "#6b7280"; ctx.font = "11px system-ui"; ctx.strokeStyle = "#e5e7eb";
    const ticks = roundTicks(a, b, Math.max(2, Math.floor(plotW / 110)));  // round times, as many as fit
    this.el.dataset.ticks = JSON.stringify(ticks.map(t => t[1]));
    for (const [t, label] of ticks) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, this.axisH - 4); ctx.lineTo(x, H); ctx.stroke();
      ctx.fillText(label, Math.min(x + 2, W - ctx.measureText(label).width - 2), 14);
    }
    // step boundaries (a step ends when its step metric is logged)
    const visible = (this.stepMarks || []).filter(([, t]) => t >= a && t <= b);
    this.el.dataset.steps = JSON.stringify(visible.map(m => m[0]));
    this.stepHits = [];
    ctx.save(); ctx.strokeStyle = "#94a3b8"; ctx.setLineDash([3, 3]); ctx.fillStyle = "#475569"; ctx.font = "10px system-ui";
    // labels thinned to what fits: "end of step N" when there is room, "N" when there is less, none when marks
    // crowd (every step is named on hover, in the band under the axis)
    let lastRight = this.gutter - 4; const labelled = [];
    const spacing = visible.length > 1 ? plotW / visible.length : plotW;
    for (const [step, t] of visible) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, this.axisH); ctx.lineTo(x, H); ctx.stroke();
      const label = spacing > 90 ? `end of step ${step}${this.profiledSteps?.has(step) ? " (profiled)" : ""}` : String(step);
      const w = ctx.measureText(label).width, x0 = Math.min(Math.max(this.gutter, x - w - 2), W - w - 2);
      if (x0 > lastRight + 6) { ctx.fillText(label, x0, this.axisH + 9); lastRight = x0 + w; labelled.push(step); }
      this.stepHits.push([x, step]);
    }
    this.el.dataset.stepLabels = JSON.stringify(labelled);
    ctx.restore();
    // rows and labels
    this.el.querySelectorAll(".lane-label").forEach(n => n.remove());
    this.rowOf = new Map();
    rows.forEach((r, i) => {
      const y = this.axisH + i * this.rowH;
      const label = h("div", { class: (r.group !== undefined ? "lane-label lane-group" : "lane-label")
        + (this.selected.has(r.lane) ? " selected" : ""), style: `top:${y + 2}px` }, r.group ?? r.lane);
      if (r.lane !== undefined) {
        label.dataset.lane = r.lane; this.rowOf.set(r.index, y);
        if (this.onSelect) { label.title = "click: choose this lane for a profile request"; label.onclick = () => this.toggleLane(r.lane); }
      }
      this.el.append(label);
    });
    // spans
    this.rects = [];
    this.updateLegend();
    for (const s of this.data.spans) {
      const [lane, depth, name, start, end, count, id, open] = s;
      const y0 = this.rowOf.get(lane); if (y0 === undefined) continue;
      const x0 = Math.max(this.gutter, xOf(start)), x1 = Math.min(W, xOf(end));
      if (x1 < this.gutter || x0 > W) continue;
      const y = y0 + (depth ? 9 : 2), hgt = depth ? 7 : 12, w = Math.max(1, x1 - x0);
      ctx.fillStyle = colorOf(name); ctx.globalAlpha = count > 1 ? 0.6 : 0.9; ctx.fillRect(x0, y, w, hgt); ctx.globalAlpha = 1;
      if (open) {  // in progress: hatched, with an open right edge
        ctx.strokeStyle = "#fff"; ctx.save(); ctx.beginPath(); ctx.rect(x0, y, w, hgt); ctx.clip();
        for (let x = x0 - hgt; x < x0 + w; x += 6) { ctx.beginPath(); ctx.moveTo(x, y + hgt); ctx.lineTo(x + hgt, y); ctx.stroke(); }
        ctx.restore();
      }
      this.rects.push({ x0, x1: x0 + w, y, y1: y + hgt, span: s });
    }
    this.drawWindows(ctx, xOf, W, H);
    this.drawSnapshot(ctx, xOf, W, H);
    this.drawFinding(ctx, xOf, W);
    this.drawCritical(ctx, xOf, W);
  }
  drawFinding(ctx, xOf, W) {
    // a finding (findings.js): its lane banded in amber over the steps it concerns
    const f = this.finding;
    this.el.dataset.finding = f ? JSON.stringify({ lane: f.lane, kind: f.kind }) : "";
    const i = f ? this.data.lanes.indexOf(f.lane) : -1, y = i >= 0 ? this.rowOf.get(i) : undefined;
    if (!f || y === undefined || f.from_ns === undefined) return;
    const x0 = Math.max(this.gutter, xOf(f.from_ns)), x1 = Math.min(W, xOf(f.to_ns));
    if (x1 < this.gutter || x0 > W) return;
    ctx.save(); ctx.fillStyle = "rgba(245, 158, 11, 0.25)"; ctx.strokeStyle = "#d97706"; ctx.lineWidth = 2;
    ctx.fillRect(x0, y, Math.max(2, x1 - x0), this.rowH); ctx.strokeRect(x0, y + 1, Math.max(2, x1 - x0), this.rowH - 2);
    ctx.restore();
  }
  drawSnapshot(ctx, xOf, W, H) {
    // a stack snapshot: a red line at its moment, the lanes of its odd ones out (and silent processes) outlined
    const s = this.snapshot;
    this.el.dataset.snapshot = s ? JSON.stringify({ id: s.id, odd: s.odd }) : "";
    if (!s) return;
    const x = xOf(s.t_ns);
    ctx.save(); ctx.strokeStyle = "#dc2626"; ctx.lineWidth = 2;
    if (x >= this.gutter && x <= W) {
      ctx.beginPath(); ctx.moveTo(x, this.axisH); ctx.lineTo(x, H); ctx.stroke();
      ctx.fillStyle = "#dc2626"; ctx.font = "10px system-ui"; ctx.fillText("stacks", Math.min(x + 3, W - 36), this.axisH + 20);
    }
    this.data.lanes.forEach((l, i) => {
      const y = this.rowOf.get(i);
      if (y !== undefined && s.odd.includes(l)) ctx.strokeRect(this.gutter + 1, y + 1, W - this.gutter - 2, this.rowH - 2);
    });
    ctx.restore();
    this.el.querySelectorAll(".lane-label").forEach(n => n.classList.toggle("odd", s.odd.includes(n.dataset.lane)));
  }
  drawCritical(ctx, xOf, W) {
    // the shown step's critical path (explain.js): its states outlined, joined in order; a red dashed joint is an
    // idle gap on the path (nothing it waited on was running)
    const p = this.critical;
    this.el.dataset.critical = p ? JSON.stringify({ step: p.step, lanes: p.elements.map(e => e.lane) }) : "";
    if (!p || !p.elements.length) return;
    const rowY = new Map(this.data.lanes.map((l, i) => [l, this.rowOf.get(i)]));
    ctx.save(); ctx.lineWidth = 2;
    let prev = null;
    for (const e of p.elements) {
      const y = rowY.get(e.lane);
      const x0 = Math.max(this.gutter, xOf(e.start_ns)), x1 = Math.min(W, xOf(e.end_ns));
      if (y !== undefined && x1 >= this.gutter && x0 <= W) {
        ctx.strokeStyle = "#111827"; ctx.setLineDash([]); ctx.strokeRect(x0, y + 1, Math.max(2, x1 - x0), 14);
        if (prev) {
          const gap = e.start_ns - prev.end_ns > 1e6;
          ctx.strokeStyle = gap ? "#dc2626" : "#111827"; ctx.setLineDash(gap ? [3, 2] : []);
          ctx.beginPath(); ctx.moveTo(prev.x, prev.y); ctx.lineTo(x0, y + 8); ctx.stroke();
        }
        prev = { x: x1, y: y + 8, end_ns: e.end_ns };
      } else prev = null;
    }
    ctx.restore();
  }
  toggleLane(lane) {
    if (this.selected.has(lane)) this.selected.delete(lane); else this.selected.add(lane);
    this.draw(); this.onSelect?.([...this.selected]);
  }
  drawWindows(ctx, xOf, W, H) {
    // profiled windows: an amber band over the profiled lanes (every lane when the process named none in view)
    const shown = [];
    for (const w of this.windows) {
      const x0 = Math.max(this.gutter, xOf(w.start_ns)), x1 = Math.min(W, xOf(w.end_ns));
      if (x1 < this.gutter || x0 > W) continue;
      const ys = this.data.lanes.map((l, i) => w.lanes.includes(l) ? this.rowOf.get(i) : undefined).filter(y => y !== undefined);
      const bands = ys.length ? ys.map(y => [y, this.rowH]) : [[this.axisH, H - this.axisH]];
      ctx.save(); ctx.fillStyle = "rgba(245, 158, 11, 0.18)"; ctx.strokeStyle = "#d97706"; ctx.setLineDash([4, 2]);
      for (const [y, hh] of bands) { ctx.fillRect(x0, y, Math.max(2, x1 - x0), hh); ctx.strokeRect(x0, y, Math.max(2, x1 - x0), hh); }
      ctx.fillStyle = "#92400e"; ctx.font = "10px system-ui"; ctx.fillText(`profiled (${w.id.slice(0, 6)})`, x0 + 2, bands[0][0] + 10);
      ctx.restore(); shown.push(w.id);
    }
    this.el.dataset.profiled = JSON.stringify(shown);
  }
  spanRect(i) { const r = this.rects[i]; if (!r) return null; const b = this.canvas.getBoundingClientRect();
    return { x: b.left + (r.x0 + r.x1) / 2, y: b.top + (r.y + r.y1) / 2, name: r.span[2] }; }
  onMove(e) {
    if (this.drag) {
      const dx = e.clientX - this.drag.x, span = this.drag.to - this.drag.from, dt = dx / (this.width() - this.gutter) * span;
      this.view = [this.drag.from - dt, this.drag.to - dt]; this.follow = false; this.draw(); return;
    }
    if (e.target !== this.canvas) return;
    const x = e.offsetX, y = e.offsetY, tip = $("#tooltip");
    this.crosshair(x);
    tip.dataset.owner = "timeline"; tip.dataset.spanId = "";
    const place = (text) => { tip.textContent = text; tip.hidden = false; tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`; };
    if (y <= this.axisH + 14) {  // the step band: every step mark is named here, labelled or not
      const mark = (this.stepHits || []).filter(([mx]) => Math.abs(mx - x) < 8).sort((p, q) => Math.abs(p[0] - x) - Math.abs(q[0] - x))[0];
      if (mark) { place(`end of step ${mark[1]}${this.profiledSteps?.has(mark[1]) ? " (profiled)" : ""} · click: select it`); tip.dataset.step = mark[1]; return; }
    }
    const hit = (this.rects || []).filter(r => x >= r.x0 - 1 && x <= r.x1 + 1 && y >= r.y && y <= r.y1).pop();
    if (!hit) { tip.hidden = true; return; }
    const [laneI, , name, start, end, count, id, open] = hit.span;
    const step = this.stepOf(start);
    const lines = [`${name}  on ${this.data.lanes[laneI]}`,
      `${step !== null ? "step " + step + " · " : ""}started ${timeTicks(start, start, 1)[0]} · ${open ? "in progress, " : ""}${fmtDur((end - start) / 1e9)}`,
      count > 1 ? `${count} merged spans (zoom in to separate)` : ""];
    tip.textContent = lines.filter(Boolean).join("\n"); tip.hidden = false;
    tip.dataset.step = step ?? ""; tip.dataset.detailed = ""; tip.dataset.spanId = id ?? "";
    tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
    // (the details of this span only: the pointer may be on another one, or off the timeline, when they come)
    if (id && count === 1) this.detail(id).then(d => {
      if (tip.hidden || !d || tip.dataset.spanId !== String(id)) return;
      tip.textContent = lines.filter(Boolean).join("\n") + "\n" +
        Object.entries(d.attributes).filter(([k]) => !PLUMBING.has(k)).map(([k, v]) => `${k}: ${v}`).join("\n");
      tip.dataset.detailed = "1"; });
  }
  // the timeline's cursor moves the time charts' crosshair (the Prometheus panels, the trainer charts by time)
  crosshair(px) {
    if (state.timeline !== this || !this.view) return;
    const sec = px === null || px < this.gutter ? null : (this.view[0] + (px - this.gutter) / (this.width() - this.gutter) * (this.view[1] - this.view[0])) / 1e9;
    state.hoverSec = sec;  // kept: a chart redrawn by a refresh puts its crosshair back (plot.js)
    for (const p of state.charts) applyHover(p);
  }
  hideTip() { const tip = $("#tooltip"); if (tip.dataset.owner === "timeline") { tip.hidden = true; tip.dataset.spanId = ""; } }
  isRunning(step) { const marks = this.stepMarks || []; return marks.length > 0 && step === marks[marks.length - 1][0] + 1; }
  stepOf(ns) {
    // the step a moment belongs to: the first step whose end mark is at or after it (after the last: the one running)
    const marks = this.stepMarks || [], m = marks.find(([, t]) => t >= ns);
    return m ? m[0] : marks.length ? marks[marks.length - 1][0] + 1 : null;
  }
  async detail(id) {
    if (!this.detailCache.has(id)) this.detailCache.set(id, api(`/api/v1/runs/${this.runId}/spans/${id}`).catch(() => null));
    return this.detailCache.get(id);
  }
}


// Chart point or breakdown card → the timeline zoomed to that step (double-click the timeline to go back).
// Select step N everywhere: the timeline(s) zoom to it, the cards and the step table show it (state.onStep), the
// address says it (`?step=N`, so the view survives a reload and can be shared).
export function showStep(step, { scroll = true } = {}) {
  state.selectedStep = step;
  setUrlParams({ step });
  (state.onStep || []).forEach(fn => fn(step));
  redrawMarks();
  if (!state.timeline) return;
  for (const t of state.timelines || [state.timeline]) t.zoomToStep(step);
  if (scroll) document.getElementById("timeline-h")?.scrollIntoView({ behavior: "smooth" });
}
export function showTime(ns) { const step = state.timeline?.stepOf(ns); if (step !== null && step !== undefined) showStep(step); }
