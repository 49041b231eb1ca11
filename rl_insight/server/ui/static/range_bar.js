/* rl-insight UI, range_bar.js: the run page's range controls: a picker (whole run, last 5 / 15 / 60 min, a step range),
   the auto-refresh interval, and a minimap of every step's duration (drag across it to choose a step range, click a
   bar to select that step). They only call range.js (setRange) and showStep; they redraw when the range changes.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { setUrlParams, state } from "./api.js";
import { h } from "./dom.js";
import { clock, fmtDur } from "./format.js";
import { currentRange, setRange } from "./range.js";
import { showStep } from "./timeline.js";

const PRESETS = [["whole run", null], ["last 5 min", 300], ["last 15 min", 900], ["last 60 min", 3600]];
export const REFRESH = [["refresh 3 s", 3000], ["refresh 10 s", 10000], ["refresh 30 s", 30000], ["refresh 1 min", 60000], ["refresh off", 0]];

export class RangeBar {
  constructor(el, { refreshMs, onRefresh }) {
    this.el = el;
    this.preset = h("select", { id: "range-preset", title: "the time range of the timeline and every chart",
      onchange: () => { const v = this.preset.value; if (v === "custom") return;
        setRange(v === "" ? null : { last_s: +v }); } },
      ...PRESETS.map(([label, s]) => h("option", { value: s ?? "" }, label)), h("option", { value: "custom", disabled: "" }, "custom"));
    const num = (id, ph) => h("input", { type: "number", id, min: 0, step: 1, placeholder: ph, class: "step-input" });
    this.fromStep = num("range-from-step", "from step"); this.toStep = num("range-to-step", "to step");
    const applySteps = (e) => { e.preventDefault(); const a = +this.fromStep.value, b = +this.toStep.value;
      if (this.fromStep.value !== "" && this.toStep.value !== "" && a <= b) setRange({ steps: [a, b] }); };
    this.refresh = h("select", { id: "refresh-interval", title: "how often a live run's views refresh",
      onchange: () => { setUrlParams({ refresh: +this.refresh.value === 3000 ? null : this.refresh.value }); onRefresh(+this.refresh.value); } },
      ...REFRESH.map(([label, ms]) => h("option", { value: ms, selected: ms === refreshMs ? "" : null }, label)));
    this.label = h("span", { class: "muted", id: "range-label" });
    this.loading = h("span", { class: "range-loading", id: "range-loading", role: "status", hidden: "" }, "loading the range…");
    this.minimap = h("canvas", { id: "minimap", title: "every step's duration: drag to choose a step range, click a bar to select its step" });
    el.replaceChildren(h("div", { class: "bar range-bar" }, this.preset,
      h("form", { class: "inline", onsubmit: applySteps }, this.fromStep, "–", this.toStep, h("button", { type: "submit", id: "range-apply-steps" }, "show steps")),
      this.refresh, this.label, this.loading), this.minimap);
    this.minimapEvents();
    (state.onRange ||= []).push(() => this.show());
    (state.onStep ||= []).push(() => this.drawMinimap());
  }
  // the controls say what the range is now
  show() {
    const r = state.range, { secs, steps } = currentRange();
    this.preset.value = !r ? "" : r.last_s && PRESETS.some(([, s]) => s === r.last_s) ? String(r.last_s) : "custom";
    this.fromStep.value = steps ? steps[0] : ""; this.toStep.value = steps ? steps[1] : "";
    this.label.textContent = !r ? "" : secs ? `${clock(secs[0])} – ${clock(secs[1])} (${fmtDur(secs[1] - secs[0])})`
      + (steps ? ` · steps ${steps[0]}–${steps[1]}` : "") : steps ? `steps ${steps[0]}–${steps[1]}` : "";
    this.el.dataset.range = JSON.stringify({ secs, steps });
    this.drawMinimap();
  }
  // the finished steps, and — while the run is stalled or hung — the one running since the last ended (a bar in red
  // that grows: the hang's step has its place on the minimap before it ends, if it ever does)
  steps() {
    const done = [...(state.stepTable?.steps || [])].sort((a, b) => a.step - b.step);
    const marks = state.timeline?.stepMarks || [];
    if (!["stalled", "hung"].includes(state.runStatus) || !marks.length) return done;
    const [last, at] = marks[marks.length - 1];
    if (done.some(s => s.step === last + 1)) return done;
    return [...done, { step: last + 1, duration_s: Math.max(0, Date.now() / 1e3 - at / 1e9), running: true }];
  }
  drawMinimap() {
    // the minimap always holds its place (an empty strip before two steps): nothing below it moves when steps arrive
    const steps = this.steps(), c = this.minimap, dpr = devicePixelRatio || 1;
    const W = Math.max(300, this.el.clientWidth), H = 36;
    c.width = W * dpr; c.height = H * dpr; c.style.width = `${W}px`; c.style.height = `${H}px`;
    const ctx = c.getContext("2d"); ctx.scale(dpr, dpr); ctx.clearRect(0, 0, W, H);
    c.dataset.steps = steps.length;
    c.dataset.running = steps.find(s => s.running)?.step ?? "";
    if (steps.length < 2) return;
    const max = Math.max(...steps.map(s => s.duration_s || 0)) || 1, bw = W / steps.length;
    const { steps: sel } = currentRange();
    steps.forEach((s, i) => {
      const inside = !sel || (s.step >= sel[0] && s.step <= sel[1]);
      ctx.fillStyle = s.running ? "#dc2626" : s.step === state.selectedStep ? "#d97706" : s.profiled ? "#fbbf24" : inside ? "#60a5fa" : "#e2e8f0";
      const bh = Math.max(1, (H - 4) * (s.duration_s || 0) / max), gap = bw > 6 ? 2 : bw > 3 ? 1 : 0;
      ctx.fillRect(i * bw + gap / 2, H - bh, Math.max(1, bw - gap), bh);
    });
    if (this.drag) { ctx.fillStyle = "rgba(37, 99, 235, 0.2)"; const [a, b] = [this.drag.x0, this.drag.x1].sort((p, q) => p - q); ctx.fillRect(a, 0, b - a, H); }
    c.dataset.steps = steps.length;
  }
  stepAt(x) { const steps = this.steps(); const i = Math.floor(x / (this.minimap.clientWidth / steps.length)); return steps[Math.max(0, Math.min(steps.length - 1, i))]?.step; }
  minimapEvents() {
    const c = this.minimap;
    c.addEventListener("mousedown", (e) => { this.drag = { x0: e.offsetX, x1: e.offsetX }; });
    c.addEventListener("mousemove", (e) => {
      if (this.drag) { this.drag.x1 = e.offsetX; this.drawMinimap(); }
      const s = this.steps().find(x => x.step === this.stepAt(e.offsetX));
      c.title = s ? `step ${s.step}: ${fmtDur(s.duration_s)}${s.profiled ? " (profiled)" : ""} · drag: a step range · click: select` : "";
    });
    window.addEventListener("mouseup", () => {
      const d = this.drag; if (!d) return; this.drag = null;
      const a = this.stepAt(Math.min(d.x0, d.x1)), b = this.stepAt(Math.max(d.x0, d.x1));
      if (Math.abs(d.x1 - d.x0) < 3) { if (a !== undefined) showStep(a, { scroll: false }); }
      else if (a !== undefined && b !== undefined) setRange({ steps: [a, b] });
      this.drawMinimap();
    });
  }
}
