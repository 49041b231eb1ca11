/* rl-insight UI, format.js: numbers, units, durations and times as the UI writes them.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */

// a run's processes are still heard from: live, or live and stuck (stalled: a lane far past its usual time; hung)
export const isLive = (status) => status === "live" || status === "stalled" || status === "hung";

export const fmtNum = (v) => (v === null || v === undefined || Number.isNaN(v)) ? "–" :
  (Math.abs(v) >= 1e4 || (Math.abs(v) > 0 && Math.abs(v) < 1e-3)) ? v.toExponential(3) : (+v.toFixed(4)).toString();
// Axis ticks: SI prefixes for large numbers (52.5k, 1.2M), short exponents for tiny ones (2.5e-4), never clipped.
const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
const trim = (x, digits) => (+x.toPrecision(digits)).toString();
export const fmtTick = (v) => {
  if (v === null || v === undefined || Number.isNaN(v)) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  for (const [f, p] of SI) if (a >= f) return trim(v / f, 3) + p;
  if (a < 1e-2) return v.toExponential(1).replace(/\.0e/, "e");
  return trim(v, 4);
};
// Units of the Prometheus panels (Grafana unit ids from rl_insight/semantics/panels.py), formatted like Grafana.
const fmtSeconds = (v) => { const a = Math.abs(v); return a === 0 ? "0" : a < 1e-3 ? `${fmtTick(v * 1e6)} µs` : a < 1 ? `${fmtTick(v * 1e3)} ms`
  : `${fmtTick(v)} s`; };
const UNIT_FMT = {
  percentunit: (v) => `${fmtTick(v * 100)}%`, percent: (v) => `${fmtTick(v)}%`, s: fmtSeconds,
  bytes: (v) => `${fmtTick(v)}B`, decmbytes: (v) => `${fmtTick(v * 1e6)}B`, Bps: (v) => `${fmtTick(v)}B/s`,
  MBs: (v) => `${fmtTick(v * 1e6)}B/s`, tps: (v) => `${fmtTick(v)} tok/s`, reqps: (v) => `${fmtTick(v)} req/s`,
  ops: (v) => `${fmtTick(v)} op/s`, watt: (v) => `${fmtTick(v)} W`, celsius: (v) => `${fmtTick(v)} °C`,
};
export const fmtUnit = (unit, v) => (v === null || v === undefined || Number.isNaN(v)) ? "" : (UNIT_FMT[unit] || fmtTick)(v);
// A constant series gets a small band around its value, not uPlot's default 0..100.
export const yRange = (u, min, max) => {
  if (min === null || max === null) return [0, 1];
  if (min === max) { const pad = Math.abs(min) * 0.1 || 1; return [min - pad, max + pad]; }
  return uPlot.rangeNum(min, max, 0.1, true);
};
// Timeline tick labels with as many fractional-second digits as the tick spacing needs (never two equal labels).
export const timeTicks = (fromNs, toNs, n) => {
  const stepMs = (toNs - fromNs) / n / 1e6;
  const digits = stepMs >= 1000 ? 0 : stepMs >= 100 ? 1 : stepMs >= 10 ? 2 : 3;
  return Array.from({ length: n + 1 }, (_, i) => {
    const ms = (fromNs + (toNs - fromNs) * i / n) / 1e6, d = new Date(ms);
    const hms = d.toLocaleTimeString([], { hour12: false });
    return digits ? `${hms}.${String(Math.floor(ms % 1000)).padStart(3, "0").slice(0, digits)}` : hms;
  });
};
// span attributes that are bookkeeping, not the user's (the tooltip leaves them out)
export const PLUMBING = new Set(["process_id", "monitor.trace_segment", "state_name", "state_lane_id", "project", "experiment_name"]);
export const fmtDur = (s) => s < 1e-3 ? `${(s * 1e6).toFixed(0)} µs` : s < 1 ? `${(s * 1e3).toFixed(1)} ms` : s < 120 ? `${s.toFixed(2)} s`
  : `${(s / 60).toFixed(1)} min`;
export const ago = (ts) => { const s = Date.now() / 1000 - ts; return s < 90 ? `${s.toFixed(0)} s ago` : s < 5400 ? `${(s / 60).toFixed(0)} min ago`
  : `${(s / 3600).toFixed(1)} h ago`; };
// 24-hour wall-clock time of epoch seconds, everywhere (never "5:03pm"): HH:MM, or HH:MM:SS.
const pad2 = (n) => String(n).padStart(2, "0");
export const clock = (sec, withSeconds = true) => { const d = new Date(sec * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}` + (withSeconds ? `:${pad2(d.getSeconds())}` : ""); };
// Axis ticks at round times (…, 100 ms, 1 s, 5 s, 15 s, 1 min, 5 min, 1 h …): at most n of them over [fromNs, toNs],
// each [ns, label] with as many fractional digits as the spacing needs.
const ROUND_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5,
  108e5, 216e5, 432e5, 864e5];
export const roundTicks = (fromNs, toNs, n) => {
  const spanMs = Math.max(1e-6, (toNs - fromNs) / 1e6);
  const incr = ROUND_MS.find(x => spanMs / x <= n) ?? ROUND_MS[ROUND_MS.length - 1];
  const digits = incr >= 1000 ? 0 : incr >= 100 ? 1 : incr >= 10 ? 2 : 3;
  const out = [];
  for (let ms = Math.ceil(fromNs / 1e6 / incr) * incr; ms * 1e6 <= toNs; ms += incr) {
    const base = clock(Math.floor(ms / 1000), incr < 6e4);
    out.push([ms * 1e6, digits ? `${base}.${String(Math.round(ms % 1000)).padStart(3, "0").slice(0, digits)}` : base]);
  }
  return out;
};
