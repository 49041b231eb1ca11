/* rl-insight UI, range.js: the run page's one time range, shared by the timeline, the trainer charts (by step and by
   time) and the Prometheus panels.
   state.range is one of: null (the whole run; a live run's view follows its end), {last_s} (the last N seconds,
   following), {secs: [a, b]} (epoch seconds, fixed), {steps: [a, b]} (a step range, fixed). Whoever changes it (the
   picker, a drag on a chart, a zoom or pan on the timeline, the minimap) calls setRange; every view then shows the same
   window, and the address says it (`last=`, `from=`/`to=` in ms, `steps=a-b`) so a reload or a shared link keeps it.
   Steps and time convert through the timeline's step marks (a step spans from the previous step's end to its own).
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { setUrlParams, state } from "./api.js";
import { applyViewRangeAll } from "./plot.js";

// epoch seconds of the steps' span: from step a's start to step b's end (null when the marks do not know them)
function stepsToSecs([a, b]) {
  const t = state.timeline;
  const ra = t?.stepRange(a), rb = t?.stepRange(b);
  return ra && rb ? [ra[0] / 1e9, rb[1] / 1e9] : null;
}
// the steps a time window touches: the step its start belongs to, to the step its end belongs to (or the last)
function secsToSteps([a, b]) {
  const t = state.timeline, marks = t?.stepMarks || [];
  if (!marks.length) return null;
  const first = t.stepOf(a * 1e9), last = t.stepOf(b * 1e9) ?? marks[marks.length - 1][0];
  return first === null ? null : [first, Math.max(first, last)];
}

// The window now, on both axes: {secs, steps} (either may be null: all of it).
export function currentRange() {
  const r = state.range;
  if (!r) return { secs: null, steps: null };
  if (r.last_s) { const now = Date.now() / 1000; const secs = [now - r.last_s, now]; return { secs, steps: secsToSteps(secs) }; }
  if (r.secs) return { secs: r.secs, steps: secsToSteps(r.secs) };
  return { secs: stepsToSecs(r.steps), steps: r.steps };
}
state.rangeNow = currentRange;  // plot.js reads it on every redraw (no import cycle through the charts)

// `?from_s=&to_s=` for the APIs that take a window (the Prometheus panels), or nothing for the run's own default.
export function windowQuery() {
  const { secs } = currentRange();
  return secs ? `?from_s=${Math.max(0, secs[0]).toFixed(3)}&to_s=${Math.max(0, secs[1]).toFixed(3)}` : "";
}

export function rangeParams(r) {
  return { last: r?.last_s ?? null, from: r?.secs ? Math.round(r.secs[0] * 1000) : null, to: r?.secs ? Math.round(r.secs[1] * 1000) : null,
    steps: r?.steps ? `${r.steps[0]}-${r.steps[1]}` : null };
}
// The range an address describes (null: the whole run); malformed values are ignored, never thrown.
export function rangeFromParams(params) {
  const num = (k) => (params.get(k) !== null && /^\d+(\.\d+)?$/.test(params.get(k)) ? +params.get(k) : null);
  const steps = /^(\d+)-(\d+)$/.exec(params.get("steps") || "");
  if (steps && +steps[1] <= +steps[2]) return { steps: [+steps[1], +steps[2]] };
  if (num("from") !== null && num("to") !== null && num("from") < num("to")) return { secs: [num("from") / 1000, num("to") / 1000] };
  if (num("last") !== null && num("last") > 0) return { last_s: num("last") };
  return null;
}

// Set the range and show it everywhere. `source` is the view that set it (a timeline is not told its own zoom back).
export function setRange(r, { source = null } = {}) {
  state.range = r;
  setUrlParams(rangeParams(r));
  applyViewRangeAll();
  const t = state.timeline;
  if (r?.steps && t && !stepsToSecs(r.steps)) {
    // steps newer than the step marks the timeline fetched (the charts refresh ahead of it): fetch them first, or
    // the timeline would show the whole run for a range of steps
    t._stepsLoadedAt = 0;
    loading(t.loadSteps().catch(() => {}).then(() => { if (state.range === r) return showRange(r, source); }));
    return;
  }
  showRange(r, source);
}

function showRange(r, source) {
  const { secs } = currentRange();
  const pending = [];
  for (const t of state.timelines || []) {
    if (t === source) continue;
    pending.push(t.setWindow(secs ? [secs[0] * 1e9, secs[1] * 1e9] : null, !r || !!r.last_s));
  }
  pending.push(state.prom?.refresh().catch(() => {}));
  (state.onRange || []).forEach(fn => fn(r));
  const all = Promise.allSettled(pending);
  loading(all);
  return all;
}

// "loading the range…" beside the picker until the views that fetch for a range (the timeline's spans, the
// Prometheus panels) have drawn it: a wide range over a long run takes seconds, and the old window must not pass
// for the new one meanwhile. Only the latest range's loading clears it.
let loadingToken = 0;
function loading(done) {
  const el = document.getElementById("range-loading");
  const mine = ++loadingToken;
  if (el) el.hidden = false;
  done.then(() => { if (mine === loadingToken && el) el.hidden = true; });
}
