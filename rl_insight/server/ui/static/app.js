/* rl-insight built-in UI: runs list, run page (insights, RL state timeline, metric charts, targets).
   Plain JavaScript, no build step, no network access beyond this server. */
"use strict";

const $ = (sel, el = document) => el.querySelector(sel);
const h = (tag, attrs = {}, ...kids) => {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) el.append(kid instanceof Node ? kid : String(kid));
  return el;
};
const fmtNum = (v) => (v === null || v === undefined || Number.isNaN(v)) ? "–" :
  (Math.abs(v) >= 1e4 || (Math.abs(v) > 0 && Math.abs(v) < 1e-3)) ? v.toExponential(3) : (+v.toFixed(4)).toString();
// Axis ticks: SI prefixes for large numbers (52.5k, 1.2M), short exponents for tiny ones (2.5e-4), never clipped.
const SI = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
const trim = (x, digits) => (+x.toPrecision(digits)).toString();
const fmtTick = (v) => {
  if (v === null || v === undefined || Number.isNaN(v)) return "";
  const a = Math.abs(v);
  if (a === 0) return "0";
  for (const [f, p] of SI) if (a >= f) return trim(v / f, 3) + p;
  if (a < 1e-2) return v.toExponential(1).replace(/\.0e/, "e");
  return trim(v, 4);
};
// Units of the Prometheus panels (Grafana unit ids from rl_insight/panels.py), formatted like Grafana.
const fmtSeconds = (v) => { const a = Math.abs(v); return a === 0 ? "0" : a < 1e-3 ? `${fmtTick(v * 1e6)} µs` : a < 1 ? `${fmtTick(v * 1e3)} ms`
  : `${fmtTick(v)} s`; };
const UNIT_FMT = {
  percentunit: (v) => `${fmtTick(v * 100)}%`, percent: (v) => `${fmtTick(v)}%`, s: fmtSeconds,
  bytes: (v) => `${fmtTick(v)}B`, decmbytes: (v) => `${fmtTick(v * 1e6)}B`, Bps: (v) => `${fmtTick(v)}B/s`,
  MBs: (v) => `${fmtTick(v * 1e6)}B/s`, tps: (v) => `${fmtTick(v)} tok/s`, reqps: (v) => `${fmtTick(v)} req/s`,
  ops: (v) => `${fmtTick(v)} op/s`, watt: (v) => `${fmtTick(v)} W`, celsius: (v) => `${fmtTick(v)} °C`,
};
const fmtUnit = (unit, v) => (v === null || v === undefined || Number.isNaN(v)) ? "" : (UNIT_FMT[unit] || fmtTick)(v);
// A constant series gets a small band around its value, not uPlot's default 0..100.
const yRange = (u, min, max) => {
  if (min === null || max === null) return [0, 1];
  if (min === max) { const pad = Math.abs(min) * 0.1 || 1; return [min - pad, max + pad]; }
  return uPlot.rangeNum(min, max, 0.1, true);
};
// Timeline tick labels with as many fractional-second digits as the tick spacing needs (never two equal labels).
const timeTicks = (fromNs, toNs, n) => {
  const stepMs = (toNs - fromNs) / n / 1e6;
  const digits = stepMs >= 1000 ? 0 : stepMs >= 100 ? 1 : stepMs >= 10 ? 2 : 3;
  return Array.from({ length: n + 1 }, (_, i) => {
    const ms = (fromNs + (toNs - fromNs) * i / n) / 1e6, d = new Date(ms);
    const hms = d.toLocaleTimeString([], { hour12: false });
    return digits ? `${hms}.${String(Math.floor(ms % 1000)).padStart(3, "0").slice(0, digits)}` : hms;
  });
};
// span attributes that are bookkeeping, not the user's (the tooltip leaves them out)
const PLUMBING = new Set(["process_id", "monitor.trace_segment", "state_name", "state_lane_id", "project", "experiment_name"]);
const fmtDur = (s) => s < 1e-3 ? `${(s * 1e6).toFixed(0)} µs` : s < 1 ? `${(s * 1e3).toFixed(1)} ms` : s < 120 ? `${s.toFixed(2)} s`
  : `${(s / 60).toFixed(1)} min`;
const ago = (ts) => { const s = Date.now() / 1000 - ts; return s < 90 ? `${s.toFixed(0)} s ago` : s < 5400 ? `${(s / 60).toFixed(0)} min ago`
  : `${(s / 3600).toFixed(1)} h ago`; };

class ApiError extends Error {}
async function api(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) { state.session.authenticated = false; render(); throw new ApiError("login required"); }
  const body = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new ApiError(body.detail || `HTTP ${r.status}`);
  return body;
}

const state = { session: null, timers: [], charts: [], timeline: null };
window.rlInsight = state;  // for debugging and for the browser tests

function clearTimers() { state.timers.forEach(clearInterval); state.timers = []; state.charts.forEach(c => c.destroy()); state.charts = []; }
function every(ms, fn) { state.timers.push(setInterval(fn, ms)); }

/* ---------------------------------------------------------------- routing */
async function render() {
  clearTimers();
  const app = $("#app");
  if (!state.session) state.session = await (await fetch("/api/v1/session", { credentials: "same-origin" })).json();
  const links = $("#links");
  links.replaceChildren();
  if (state.session.prometheus_url) links.append(h("a", { href: state.session.prometheus_url, target: "_blank", id: "link-prometheus" }, "Prometheus"));
  if (state.session.grafana_url) links.append(h("a", { href: state.session.grafana_url, target: "_blank", id: "link-grafana" }, "Grafana"));
  if (state.session.auth_required && !state.session.authenticated) return renderLogin(app);
  const m = location.hash.match(/^#\/run\/(\d+)(?:\?compare=([\d,]+))?/);
  try {
    if (m) await renderRun(app, +m[1], (m[2] || "").split(",").filter(Boolean).map(Number));
    else await renderRuns(app);
  } catch (e) { if (!(e instanceof ApiError && e.message === "login required")) app.replaceChildren(h("p", { class: "error" }, String(e.message || e))); }
}
window.addEventListener("hashchange", render);

function renderLogin(app) {
  const input = h("input", { type: "password", id: "token", placeholder: "token", autocomplete: "current-password" });
  const err = h("p", { class: "error" });
  const form = h("form", { class: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    const r = await fetch("/api/v1/login", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: input.value }) });
    if (r.ok) { state.session = null; render(); } else err.textContent = (await r.json()).detail;
  } }, h("h2", {}, "Sign in"), h("p", { class: "muted" }, "Use the server's token: the one given to `rl-insight server start --token` (or RL_INSIGHT_TOKEN), or the generated one it printed; `rl-insight server credentials` shows it."),
    input, h("button", { type: "submit" }, "Sign in"), err);
  app.replaceChildren(form);
}

/* ---------------------------------------------------------------- runs list */
async function renderRuns(app) {
  $("#crumbs").textContent = "runs";
  const selected = new Set();
  const table = h("table", { class: "grid", id: "runs-table" });
  const compareBtn = h("button", { id: "compare", disabled: true, onclick: () => {
    const ids = [...selected]; location.hash = `#/run/${ids[0]}?compare=${ids.slice(1).join(",")}`; } }, "Compare selected");
  app.replaceChildren(h("h2", {}, "Runs"), h("div", { class: "bar" }, compareBtn), table);
  const load = async () => {
    const { runs } = await api("/api/v1/runs");
    state.runNames = Object.fromEntries(runs.map(r => [r.id, `${r.project}/${r.experiment_name}`]));
    const firing = await runAlerts();
    table.replaceChildren(h("tr", {}, h("th", {}, ""), h("th", {}, "project"), h("th", {}, "experiment"), h("th", {}, "status"),
      h("th", {}, "alerts"), h("th", {}, "last step"), h("th", {}, "last seen")));
    if (!runs.length) table.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs yet: point RL_INSIGHT_SERVER_URL here, or run `rl-insight demo`.")));
    for (const r of runs) {
      const box = h("input", { type: "checkbox", onclick: (ev) => { ev.stopPropagation(); box.checked ? selected.add(r.id) : selected.delete(r.id);
        compareBtn.disabled = selected.size < 2; } });
      if (selected.has(r.id)) box.checked = true;
      table.append(h("tr", { "data-run-id": r.id, onclick: () => { location.hash = `#/run/${r.id}`; } },
        h("td", {}, box), h("td", {}, r.project || "–"), h("td", {}, r.experiment_name || "–"),
        h("td", {}, h("span", { class: `badge ${r.status}` }, r.status),
          r.archived ? h("span", { class: "badge archived", title: "its scrape targets are archived (rl-insight server experiments restore)" }, "archived") : null),
        h("td", { class: "alerts-cell" }, alertBadges(firing.get(`${r.project}\u0000${r.experiment_name}`))),
        h("td", {}, r.last_step ?? "–"), h("td", { title: new Date(r.last_seen * 1000).toISOString() }, ago(r.last_seen))));
    }
  };
  await load();
  every(5000, load);
}

// Alerts per run (labels project/experiment_name), from the server's view of Prometheus' rules.
async function runAlerts() {
  const byRun = new Map();
  try {
    const a = await api("/api/v1/alerts");
    for (const x of [...a.active, ...a.recent]) {
      const k = `${x.labels.project}\u0000${x.labels.experiment_name}`;
      if (!byRun.has(k)) byRun.set(k, []);
      byRun.get(k).push(x);
    }
  } catch (e) { /* the runs list works without Prometheus */ }
  return byRun;
}
function alertBadges(list) {
  if (!list || !list.length) return h("span", { class: "muted" }, "–");
  const n = (st) => list.filter(a => a.state === st).length;
  const names = [...new Set(list.map(a => `${a.alertname} (${a.state})`))].join("\n");
  return h("span", { title: names },
    n("firing") ? h("span", { class: "badge firing", "data-firing": n("firing") }, `${n("firing")} firing`) : null,
    n("pending") ? h("span", { class: "badge pending" }, `${n("pending")} pending`) : null,
    n("resolved") ? h("span", { class: "badge resolved" }, `${n("resolved")} resolved`) : null);
}

/* ---------------------------------------------------------------- run page */
async function renderRun(app, runId, compareIds) {
  const run = await api(`/api/v1/runs/${runId}`);
  // compared runs are named by project/experiment everywhere, even when the page was opened by URL
  const others = await Promise.all(compareIds.map(id => api(`/api/v1/runs/${id}?config=false`).catch(() => null)));
  state.runNames = { ...(state.runNames || {}), [run.id]: `${run.project}/${run.experiment_name}`,
    ...Object.fromEntries(others.filter(Boolean).map(r => [r.id, `${r.project}/${r.experiment_name}`])) };
  const compared = others.filter(Boolean);
  $("#crumbs").replaceChildren(h("a", { href: "#/" }, "runs"), " / ", `${run.project} / ${run.experiment_name}`);
  const header = h("div", { class: "bar", id: "run-header" });
  const insightsEl = h("div", { class: "cards", id: "insights" });
  const timelineEl = h("div", { id: "timeline" });
  const chartsEl = h("div", { id: "charts" });
  const alertsEl = h("div", { id: "alerts" });
  const promEl = h("div", { id: "prom-sections" });
  const targetsEl = h("div", { id: "targets" });
  const profilesEl = h("div", { id: "profiles" });
  const trajectoriesEl = h("div", { id: "trajectories" });
  const nav = h("nav", { class: "jump" }, "jump to ", ...[["insights", "insights"], ["timeline-h", "timeline"], ["trajectories-h", "trajectories"], ["profiles-h", "profiles"],
    ["metrics-h", "trainer metrics"],
    ["prom-h", "engine · TransferQueue · hardware"], ["targets-h", "targets"]].map(([id, t]) => h("a", { href: `#/run/${runId}`,
    onclick: (e) => { e.preventDefault(); document.getElementById(id)?.scrollIntoView(); } }, t)));
  // compare: one column of insight cards per run, one timeline per run stacked (a step click aligns them all)
  const cmpCards = compared.map(r => ({ run: r, el: h("div", { class: "cards", "data-run-id": r.id }) }));
  const cmpTimelines = compared.map(r => ({ run: r, el: h("div", { class: "timeline", "data-run-id": r.id }) }));
  const insightsBlock = compared.length
    ? h("div", { class: "compare-cols", id: "compare-insights" }, h("div", {}, h("h4", {}, state.runNames[run.id]), insightsEl),
        ...cmpCards.map(c => h("div", {}, h("h4", {}, state.runNames[c.run.id]), c.el)))
    : insightsEl;
  app.replaceChildren(h("h2", {}, `${run.project} / ${run.experiment_name}`, ...(run.tags || []).map(t => h("span", { class: "tag" }, t)),
      compared.length ? h("span", { class: "muted" }, " compared with ", compared.map(r => state.runNames[r.id]).join(", ")) : null),
    header, nav, renderConfig(run.config || {}), alertsEl,
    h("h3", {}, "Insights ", h("span", { class: "muted" }, "(last 5 minutes of data)")), insightsBlock,
    h("h3", { id: "timeline-h" }, "RL state timeline ", h("span", { class: "muted" }, "wheel: zoom · drag: pan · double-click: reset"
      + (compared.length ? " · click a step to show that step in every run" : ""))),
    compared.length ? h("h4", {}, state.runNames[run.id]) : "", timelineEl,  // replaceChildren would print a null
    ...cmpTimelines.flatMap(t => [h("h4", {}, state.runNames[t.run.id]), t.el]),
    h("h3", { id: "trajectories-h" }, "Agent-loop trajectories ", h("span", { class: "muted" }, "per step: click a column to sort, a row for its "
      + "turns; the long-tail card opens the trajectories that kept its replica busy")), trajectoriesEl,
    h("h3", { id: "profiles-h" }, "Profiles ", h("span", { class: "muted" }, "torch.profiler on request: click lane names on the "
      + "timeline to choose them, pick the steps; the trace comes back analysed")), profilesEl,
    h("h3", { id: "metrics-h" }, "Trainer metrics"), chartsEl,
    h("h3", { id: "prom-h" }, "Rollout engine, TransferQueue and hardware ", h("span", { class: "muted" }, "(from Prometheus, the same queries as the Grafana dashboards)")), promEl,
    h("h3", { id: "targets-h" }, "Scrape targets"), targetsEl);

  const setHeader = (r) => header.replaceChildren(
    h("span", { class: `badge ${r.status}`, id: "run-status" }, r.status), h("span", {}, "last step ", h("b", { id: "last-step" }, r.last_step ?? "–")),
    h("span", { class: "muted", id: "run-meta" }, `run ${r.id} · started ${new Date(r.first_seen * 1000).toLocaleString([], { hour12: false })}`
      + ` · ran ${fmtDur(Math.max(0, r.last_seen - r.first_seen))} · last seen ${ago(r.last_seen)}`),
    h("a", { class: "button", id: "export-csv", href: `/api/v1/runs/${runId}/export.csv` }, "Export metrics (CSV)"),
    h("a", { class: "button", id: "export-trace", href: `/api/v1/runs/${runId}/trace.json` }, "Export timeline (Perfetto JSON)"));
  setHeader(run);

  await paletteReady;  // stage colours before the first draw
  state.timeline = new Timeline(timelineEl, runId, run.status === "live");
  await state.timeline.load();  // first: the timeline is what people look at; insights may scan more data
  state.timelines = [state.timeline];
  for (const t of cmpTimelines) { const tl = new Timeline(t.el, t.run.id, t.run.status === "live"); state.timelines.push(tl); await tl.load(); }
  const profiles = state.profiles = new Profiles(profilesEl, run, state.timeline);
  await profiles.load();
  const trajectories = state.trajectories = new Trajectories(trajectoriesEl, runId);
  await trajectories.load().catch(e => trajectoriesEl.replaceChildren(h("p", { class: "error" }, `trajectories: ${e.message}`)));
  await renderInsights(insightsEl, runId);
  for (const c of cmpCards) await renderInsights(c.el, c.run.id, `r${c.run.id}-`);
  renderTargets(targetsEl, runId);
  renderAlerts(alertsEl, runId);
  const charts = new ChartGrid(chartsEl, runId, compareIds);
  await charts.load();
  const prom = state.prom = new PromSections(promEl, runId);
  await prom.load();

  let headerStep = null;
  every(3000, async () => {
    const r = await api(`/api/v1/runs/${runId}?config=false`);
    setHeader(r);
    if (r.last_step !== headerStep) { headerStep = r.last_step; renderInsights(insightsEl, runId); }  // cards follow the header
    if (r.status === "live") { await charts.refresh(); if (state.timeline.follow) await state.timeline.load(); }
    profiles.run = r; await profiles.load();
  });
  every(10000, async () => { if (run.status === "live") await trajectories.refresh(); });
  every(10000, async () => { if (run.status === "live") await prom.refresh(); renderAlerts(alertsEl, runId); });
  every(10000, () => { renderInsights(insightsEl, runId); cmpCards.forEach(c => renderInsights(c.el, c.run.id, `r${c.run.id}-`)); });
  every(15000, () => renderTargets(targetsEl, runId));
}

async function renderInsights(el, runId, idPrefix = "") {
  const s = await api(`/api/v1/runs/${runId}/insights?window_s=300`);
  const card = (k, v, id, small, step) => h("div", { class: step !== undefined && step !== null ? "card link" : "card", id: idPrefix + id,
    "data-card": id,
    title: step !== undefined && step !== null ? `show step ${step} on the timeline` : null,
    onclick: step !== undefined && step !== null ? () => showStep(step) : null },
    h("div", { class: "k" }, k), h("div", { class: small ? "v small" : "v" }, v));
  const lanes = Object.entries(s.lanes).sort((a, b) => laneKey(a[0]).localeCompare(laneKey(b[0])));
  const lastStep = s.steps[s.steps.length - 1];
  const tail = s.long_tail[s.long_tail.length - 1];
  el.replaceChildren(
    card("rollout–training overlap", `${(100 * s.overlap.overlap_ratio).toFixed(0)} %`, "insight-overlap"),
    card(`rollout long tail (${tail ? "step " + tail.step : "last step"})`, tail ? h("span", {}, `${tail.ratio.toFixed(2)}× · ${tail.slowest_lane}`,
      !idPrefix && state.trajectories?.steps?.length ? h("button", { class: "mini link", id: "long-tail-trajectories", "data-lane": tail.slowest_lane, "data-step": tail.step,
        title: `the trajectories that kept ${tail.slowest_lane} busy at step ${tail.step}`,
        onclick: (e) => { e.stopPropagation(); state.trajectories.focus({ step: tail.step, replica: tail.slowest_lane }); } }, "trajectories ›") : null) : "–",
      "insight-long-tail", false, tail?.step),
    card("stalled lanes", s.stalled.length ? s.stalled.map(x => `${x.lane}: ${x.state} ${fmtDur(x.open_s)}`).join(", ") : "none", "insight-stalled", s.stalled.length > 0),
    card("staleness", s.staleness ? `mean ${fmtNum(s.staleness.mean)} · max ${fmtNum(s.staleness.max)}` : "not reported", "insight-staleness"),
    card("rollout → training wait (last step)", (w => w ? fmtDur(w.wait_s) : "–")((s.rollout_wait || [])[(s.rollout_wait || []).length - 1]),
      "insight-wait"),
    card(`last step${lastStep ? " (" + lastStep.step + ", " + fmtDur(lastStep.duration_s) + ")" : ""}`, lastStep
      ? h("ol", { class: "breakdown" }, ...Object.entries(lastStep.states).sort((a, b) => b[1] - a[1]).map(([k, v]) =>
          h("li", {}, idPrefix ? null : h("button", { class: "mini", "data-profile-stage": k, title: `profile ${k} at the next step`,
              onclick: (e) => { e.stopPropagation(); state.profiles?.requestStage(k); } }, "⏺"),
            h("b", {}, `${(100 * v / (lastStep.duration_s || 1)).toFixed(0)}%`), ` ${k} ${fmtDur(v)}`)))
      : "–", "insight-step", true, lastStep?.step),
    card("lane utilization / bubbles", lanes.map(([l, v]) => `${l} ${(100 * v.utilization).toFixed(0)}%`).join(" · ") || "–", "insight-utilization", true));
}

async function renderTargets(el, runId) {
  const { targets } = await api(`/api/v1/runs/${runId}/targets`);
  const t = h("table", { class: "grid" }, h("tr", {}, h("th", {}, "job"), h("th", {}, "target"), h("th", {}, "labels"), h("th", {}, "health")));
  for (const x of targets) t.append(h("tr", {}, h("td", {}, x.job), h("td", {}, x.target),
    h("td", {}, Object.entries(x.labels).map(([k, v]) => `${k}=${v}`).join(", ")), h("td", {}, x.health ?? "unknown")));
  el.replaceChildren(targets.length ? t : h("p", { class: "muted" }, "No targets registered for this run."));
}

// What init(config=...) described (verl: the whole trainer config), searchable.
function renderConfig(config) {
  const keys = Object.keys(config);
  if (!keys.length) return h("div", { id: "run-config", class: "muted" }, "No run config (pass config=… to rl_insight.init to see it here).");
  const rows = h("tbody");
  const fill = (q) => rows.replaceChildren(...keys.filter(k => !q || k.toLowerCase().includes(q) || String(config[k]).toLowerCase().includes(q))
    .slice(0, 500).map(k => h("tr", {}, h("td", { class: "key" }, k), h("td", {}, String(config[k])))));
  fill("");
  return h("details", { id: "run-config" }, h("summary", {}, `Run config (${keys.length} keys)`),
    h("input", { type: "search", id: "config-search", placeholder: "filter keys and values", oninput: (e) => fill(e.target.value.trim().toLowerCase()) }),
    h("table", { class: "grid config" }, rows));
}

async function renderAlerts(el, runId) {
  const a = await api(`/api/v1/runs/${runId}/alerts`).catch(() => null);
  if (!a || a.prometheus.state !== "ok" || (!a.active.length && !a.recent.length)) { el.replaceChildren(); return; }
  const item = (x) => h("div", { class: `alert ${x.state}`, "data-alert": x.alertname, "data-state": x.state },
    h("div", { class: "head" }, h("span", { class: `badge ${x.state}` }, x.state), h("b", {}, x.alertname),
      x.severity ? h("span", { class: "muted" }, x.severity) : null,
      h("span", { class: "muted" }, x.since ? `since ${new Date(x.since).toLocaleTimeString([], { hour12: false })}`
        : x.last_firing ? `last fired ${ago(x.last_firing)}` : "")),
    h("div", {}, x.summary), x.description ? h("div", { class: "muted" }, x.description) : null,
    x.what_to_check ? h("div", { class: "check" }, h("b", {}, "What to check: "), x.what_to_check) : null);
  el.replaceChildren(h("h3", {}, "Alerts ", h("span", { class: "muted" }, `(firing and pending now; resolved within ${Math.round(a.recent_window_s / 60)} min)`)),
    ...a.active.map(item), ...a.recent.map(item));
}

/* ---------------------------------------------------------------- Prometheus panels (engine, TransferQueue, hardware) */
class PromSections {
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

/* ---------------------------------------------------------------- timeline */
const PALETTE = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4f46e5", "#059669"];
// Stage colours: rl_insight/palette.py (served as /ui/palette.json), the same in the offline HTML and PNG.
let STAGE_COLORS = { stages: {}, fallback: PALETTE, mixed: "#9ca3af" };
const paletteReady = fetch("/ui/palette.json").then(r => r.ok ? r.json() : null)
  .then(p => { if (p && p.stages && Array.isArray(p.fallback) && p.fallback.length) STAGE_COLORS = p; }).catch(() => {});
const fnv1a = (text) => { let h = 0x811c9dc5; for (const b of new TextEncoder().encode(text)) { h ^= b; h = Math.imul(h, 0x01000193) >>> 0; } return h; };
const colorOf = (name) => STAGE_COLORS.stages[name] || STAGE_COLORS.fallback[fnv1a(name) % STAGE_COLORS.fallback.length];
function laneKey(lane) { const m = /^(.+?)(?:[_-](\d+))?$/.exec(lane || ""); return m ? `${m[1]}\u0000${(m[2] || "").padStart(8, "0")}` : lane; }

class Timeline {
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
    this.pageSize = 64; this.page = 0; this.allLanes = null;
    const main = el.id === "timeline";  // compared runs' timelines carry no ids (they would repeat)
    const pid = (id) => main ? id : null;
    this.pid = pid;
    this.pager = h("div", { class: "bar", id: pid("lane-pager") });
    this.el.before(this.pager);
    this.canvas = h("canvas"); this.el.append(this.canvas);
    this.legend = h("div", { class: "legend", id: pid("timeline-legend") }); this.el.after(this.legend);
    this.data = { lanes: [], spans: [] }; this.view = null; this.detailCache = new Map();
    this.selected = new Set(); this.onSelect = null;  // lanes chosen for a profile request (click their names)
    this.windows = [];  // profiled windows drawn over their lanes: [{lanes, start_ns, end_ns, id}]
    this.canvas.addEventListener("wheel", (e) => { e.preventDefault(); this.zoom(e.offsetX, e.deltaY > 0 ? 1.25 : 0.8); }, { passive: false });
    this.canvas.addEventListener("mousedown", (e) => { this.drag = { x: e.clientX, from: this.view[0], to: this.view[1] }; });
    window.addEventListener("mouseup", () => { if (this.drag) { this.drag = null; this.fetchSoon(); } });
    window.addEventListener("mousemove", (e) => this.onMove(e));
    this.canvas.addEventListener("mouseleave", () => { $("#tooltip").hidden = true; });
    this.canvas.addEventListener("click", (e) => {
      if (e.offsetY > this.axisH + 14) return;  // the step band under the time axis
      // the nearest step mark within 30 px (marks can be closer than that when many steps are in view)
      const hit = (this.stepHits || []).filter(([x]) => Math.abs(x - e.offsetX) < 30)
        .sort((p, q) => Math.abs(p[0] - e.offsetX) - Math.abs(q[0] - e.offsetX))[0];
      if (hit) (state.timelines?.includes(this) ? showStep(hit[1]) : this.zoomToStep(hit[1]));  // compare: every run at that step
    });
    this.canvas.addEventListener("dblclick", () => { this.view = null; this.follow = true; this.load(); });
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
    const n = this.allLanes.length;
    const hidden = this.hiddenLanes ? h("a", { href: "#", id: this.pid("lanes-hidden"), class: "muted", onclick: (e) => { e.preventDefault();
      document.getElementById("trajectories-h")?.scrollIntoView(); } }, ` ${this.hiddenLanes} agent-loop trajectory lanes: see the trajectories`) : null;
    if (n <= this.pageSize) { this.pager.replaceChildren(...(hidden ? [hidden] : [])); return this.hiddenLanes && n ? this.allLanes : null; }
    const pages = Math.ceil(n / this.pageSize); this.page = Math.min(this.page, pages - 1);
    const a = this.page * this.pageSize, b = Math.min(n, a + this.pageSize);
    const go = (d) => { this.page = Math.max(0, Math.min(pages - 1, this.page + d)); this.load(); };
    this.pager.replaceChildren(h("button", { id: this.pid("lanes-prev"), onclick: () => go(-1), disabled: this.page === 0 ? "" : null }, "◀"),
      h("span", { id: this.pid("lanes-page") }, `lanes ${a + 1}–${b} of ${n}`),
      h("button", { id: this.pid("lanes-next"), onclick: () => go(1), disabled: this.page === pages - 1 ? "" : null }, "▶"), hidden);
    return this.allLanes.slice(a, b);
  }
  async load() {
    const w = this.width() - this.gutter;
    const page = await this.pageLanes();
    let q = page ? `&lanes=${encodeURIComponent(page.join(","))}` : "";
    if (this.view && !this.follow) q += `&from_ns=${Math.round(this.view[0])}&to_ns=${Math.round(this.view[1])}`;
    else if (this.view) { const span = this.view[1] - this.view[0]; const now = Date.now() * 1e6; q += `&from_ns=${Math.round(now - span)}&to_ns=${Math.round(now)}`; }
    const res = this.view ? Math.max(0, Math.floor((this.view[1] - this.view[0]) / w)) : 0;
    const d = await api(`/api/v1/runs/${this.runId}/spans?resolution_ns=${res}${q}`);
    if (!this.view) { this.view = [d.from_ns, d.to_ns]; if (d.spans.length > 20000) return this.load(); }
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
      if (i < 0) return;
    }
    // a step's metrics are logged when it ends: step N spans from the previous mark to its own
    const end = this.stepMarks[i][1], start = i > 0 ? this.stepMarks[i - 1][1] : this.data.from_ns;
    this.view = [start, end]; this.follow = false; this.draw(); this.fetchSoon();
  }
  fetchSoon() { clearTimeout(this.t); this.t = setTimeout(() => this.load(), 120); }
  zoom(px, factor) {
    const [a, b] = this.view; const x = a + (b - a) * Math.max(0, px - this.gutter) / (this.width() - this.gutter);
    this.view = [Math.round(x - (x - a) * factor), Math.round(x + (b - x) * factor)]; this.follow = false; this.draw(); this.fetchSoon();
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
    this.el.dataset.fromNs = a; this.el.dataset.toNs = b; this.el.dataset.laneCount = this.data.lanes.length; this.el.dataset.spanCount = this.data.spans.length;
    // axis
    ctx.fillStyle = "#6b7280"; ctx.font = "11px system-ui"; ctx.strokeStyle = "#e5e7eb";
    const ticks = 8;
    const labels = timeTicks(a, b, ticks);
    this.el.dataset.ticks = JSON.stringify(labels);
    for (let i = 0; i <= ticks; i++) {
      const t = a + (b - a) * i / ticks, x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, this.axisH - 4); ctx.lineTo(x, H); ctx.stroke();
      ctx.fillText(labels[i], Math.min(x + 2, W - 60), 14);
    }
    // step boundaries (a step ends when its step metric is logged)
    const visible = (this.stepMarks || []).filter(([, t]) => t >= a && t <= b);
    this.el.dataset.steps = JSON.stringify(visible.map(m => m[0]));
    this.stepHits = [];
    ctx.save(); ctx.strokeStyle = "#94a3b8"; ctx.setLineDash([3, 3]); ctx.fillStyle = "#475569"; ctx.font = "10px system-ui";
    let lastLabelX = -1e9;
    for (const [step, t] of visible) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, this.axisH); ctx.lineTo(x, H); ctx.stroke();
      if (x - lastLabelX > 44) {  // right-aligned to its line, kept inside the canvas
        const label = `end of step ${step}`, w = ctx.measureText(label).width;
        ctx.fillText(label, Math.min(Math.max(this.gutter, x - w - 2), W - w - 2), this.axisH + 9); lastLabelX = x;
      }
      this.stepHits.push([x, step]);
    }
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
    const hit = (this.rects || []).filter(r => x >= r.x0 - 1 && x <= r.x1 + 1 && y >= r.y && y <= r.y1).pop();
    if (!hit) { tip.hidden = true; return; }
    const [laneI, , name, start, end, count, id, open] = hit.span;
    const step = this.stepOf(start);
    const lines = [`${name}  on ${this.data.lanes[laneI]}`,
      `${step !== null ? "step " + step + " · " : ""}started ${timeTicks(start, start, 1)[0]} · ${open ? "in progress, " : ""}${fmtDur((end - start) / 1e9)}`,
      count > 1 ? `${count} merged spans (zoom in to separate)` : ""];
    tip.textContent = lines.filter(Boolean).join("\n"); tip.hidden = false;
    tip.dataset.step = step ?? ""; tip.dataset.detailed = "";
    tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
    if (id && count === 1) this.detail(id).then(d => { if (!tip.hidden && d) tip.textContent = lines.filter(Boolean).join("\n") + "\n" +
      Object.entries(d.attributes).filter(([k]) => !PLUMBING.has(k)).map(([k, v]) => `${k}: ${v}`).join("\n");
      tip.dataset.detailed = "1"; });
  }
  stepOf(ns) {
    // the step a moment belongs to: the first step whose end mark is at or after it
    const m = (this.stepMarks || []).find(([, t]) => t >= ns);
    return m ? m[0] : null;
  }
  async detail(id) {
    if (!this.detailCache.has(id)) this.detailCache.set(id, api(`/api/v1/runs/${this.runId}/spans/${id}`).catch(() => null));
    return this.detailCache.get(id);
  }
}

/* ---------------------------------------------------------------- profiles on request */
class Profiles {
  constructor(el, run, timeline) {
    this.el = el; this.run = run; this.timeline = timeline; this.lanes = [];
    timeline.onSelect = (lanes) => { this.lanes = lanes; this.lanesInput.value = lanes.join(","); };
    // the step after the one running now (profiled whole): the server resolves "next" by the run's freshest clock
    const nextStep = async () => "next";
    this.stepsInput = h("input", { id: "profile-steps", size: 8, placeholder: "120 or 120-121" });
    this.lanesInput = h("input", { id: "profile-lanes", size: 24, placeholder: "lanes (click names on the timeline)" });
    this.ranksInput = h("input", { id: "profile-ranks", size: 10, placeholder: "ranks, e.g. 0,3" });
    this.cuda = h("input", { type: "checkbox", id: "profile-cuda", checked: "" });
    this.memory = h("input", { type: "checkbox", id: "profile-memory" });
    this.stage = h("select", { id: "profile-stage", title: "only this state of the step (one step)" }, h("option", { value: "" }, "whole step"));
    this.msg = h("span", { class: "muted", id: "profile-msg" });
    this.nextStep = nextStep;
    this.form = h("div", { class: "bar profile-form" }, h("label", {}, "steps ", this.stepsInput), this.stage, this.lanesInput, this.ranksInput,
      h("label", {}, this.cuda, " cuda"), h("label", {}, this.memory, " memory"),
      h("button", { id: "profile-next", onclick: async () => this.request(String(await nextStep())) }, "Profile next step"),
      h("button", { id: "profile-submit", onclick: () => this.request(this.stepsInput.value.trim()) }, "Profile these steps"), this.msg);
    this.list = h("div", { id: "profile-list" });
    el.replaceChildren(this.form, this.list);
  }
  selection() {
    const csv = (v) => v.split(",").map(x => x.trim()).filter(Boolean);
    return { lanes: csv(this.lanesInput.value), ranks: csv(this.ranksInput.value).map(Number).filter(n => Number.isInteger(n) && n >= 0) };
  }
  async request(steps, extra = {}) {
    if (!steps) { this.msg.textContent = "say which steps"; return; }
    const body = { run_id: this.run.id, steps, ...this.selection(), activities: this.cuda.checked ? ["cpu", "cuda"] : ["cpu"],
      memory: this.memory.checked, stage: this.stage.value, ...extra };
    try {
      const p = await api("/api/v1/profiles", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      this.msg.textContent = `requested ${p.id} (steps ${p.request.steps[0]}–${p.request.steps[1]})`;
    } catch (e) { this.msg.textContent = `not requested: ${e.message}`; }
    await this.load();
  }
  async requestStage(name) {  // from the step breakdown: this stage, at the next step
    if (![...this.stage.options].some(o => o.value === name)) this.stage.append(h("option", { value: name }, name));
    this.stage.value = name;
    document.getElementById("profiles-h")?.scrollIntoView();
    await this.request(String(await this.nextStep()));
  }
  stageOptions() {  // the states seen on the timeline, for the stage menu
    const names = [...new Set((this.timeline.data.spans || []).map(sp => sp[2]))].sort();
    const have = new Set([...this.stage.options].map(o => o.value));
    for (const n of names) if (!have.has(n)) this.stage.append(h("option", { value: n }, n));
  }
  async cancel(id) { try { await api(`/api/v1/profiles/${id}`, { method: "DELETE" }); } catch (e) { this.msg.textContent = e.message; } await this.load(); }
  async load() {
    this.stageOptions();
    const { profiles } = await api(`/api/v1/profiles?run_id=${this.run.id}`).catch(() => ({ profiles: [] }));
    // the windows each process profiled, on the timeline
    // (over the lanes the request chose, else every lane of the process)
    this.timeline.windows = profiles.flatMap(p => Object.values(p.processes).filter(x => x.window)
      .map(x => ({ id: p.id, lanes: p.request.lanes.length ? p.request.lanes.filter(l => (x.lanes || []).includes(l)) : (x.lanes || []),
        start_ns: x.window.start_ns, end_ns: x.window.end_ns })));
    if (this.timeline.view) this.timeline.draw();
    if (!profiles.length) { this.list.replaceChildren(h("p", { class: "muted" }, "No profile requests for this run yet.")); return; }
    const rows = profiles.map(p => {
      const req = p.request, a = p.analysis || {};
      const sel = (req.stage ? `stage ${req.stage} · ` : "") +
        (["lanes", "roles", "ranks"].filter(k => req[k].length).map(k => `${k} ${req[k].join(",")}`).join(" · ") || "every process");
      const procs = Object.values(p.processes).map(x => h("div", { class: "proc", "data-state": x.state },
        h("b", {}, x.rank !== null && x.rank !== undefined ? `rank ${x.rank}` : `${x.host}:${x.pid}`
          + (x.lanes?.length ? ` (${x.lanes.slice(0, 4).join(", ")}${x.lanes.length > 4 ? ", …" : ""})` : "")), ` ${x.state}`,
        x.message ? h("span", { class: "muted" }, ` — ${x.message}`) : null));
      const links = [];
      if (a.state === "done") {  // what the analysis wrote: a memory snapshot alone has no timeline
        const files = a.files || ["timeline.html", "trace.perfetto.json"], at = (f) => `/api/v1/profiles/${p.id}/report/${f}`;
        if (files.includes("timeline.html")) links.push(h("a", { href: at("timeline.html"), target: "_blank", class: "button", "data-link": "report" }, "analysis"));
        else links.push(h("a", { href: at("summary.md"), target: "_blank", class: "button", "data-link": "summary" }, "summary"));
        if (files.includes("trace.perfetto.json")) links.push(h("a", { href: at("trace.perfetto.json"), class: "button", "data-link": "perfetto" }, "Perfetto"));
        if (files.includes("memory.csv")) links.push(h("a", { href: at("memory.csv"), class: "button", "data-link": "memory" }, "memory CSV"));
      } else if (a.state && a.state !== "none") links.push(h("span", { class: "muted" }, `analysis ${a.state}${a.message ? ": " + a.message : ""}`));
      links.push(h("button", { onclick: () => showStep(req.steps[0]), "data-link": "timeline" }, "on the timeline"));
      if (p.state === "pending" || p.state === "running") links.push(h("button", { onclick: () => this.cancel(p.id), "data-link": "cancel" }, "cancel"));
      const stages = a.state === "done" && a.stages?.length ? h("div", { class: "muted" }, "top stages: " +
        a.stages.slice(0, 4).map(s => `${s.name} ${fmtDur(s.total_s)}`).join(" · ")) : null;
      return h("tr", { "data-profile": p.id, "data-state": p.state }, h("td", {}, h("code", {}, p.id)), h("td", {}, h("span", { class: `badge ${p.state}` }, p.state)),
        h("td", {}, `${req.steps[0]}${req.steps[1] !== req.steps[0] ? "–" + req.steps[1] : ""}`), h("td", {}, sel),
        h("td", {}, procs.length ? procs : h("span", { class: "muted" }, "no process has taken it yet")), h("td", {}, ...links, stages));
    });
    this.list.replaceChildren(h("table", { class: "grid" }, h("tr", {}, ...["request", "state", "steps", "who", "processes", ""].map(t => h("th", {}, t))), ...rows));
  }
}

/* ---------------------------------------------------------------- metric charts */
const FAMILIES = ["critic", "actor", "training", "timing", "perf", "response", "prompt", "rollout", "val", "global"];
function familyOf(name) { const f = name.split("_")[0]; return FAMILIES.includes(f) ? f : "other"; }

// Families open by default: reward, loss, throughput, timing. The rest start collapsed and load when opened.
const KEY_FAMILIES = new Set(["pinned", "critic", "actor", "perf", "timing"]);
const PINS_KEY = "rl-insight.pinned-metrics";
const loadPins = () => { try { return new Set(JSON.parse(localStorage.getItem(PINS_KEY) || "[]")); } catch (e) { return new Set(); } };

class ChartGrid {
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

// Chart point or breakdown card → the timeline zoomed to that step (double-click the timeline to go back).
function showStep(step) {
  if (!state.timeline) return;
  for (const t of state.timelines || [state.timeline]) t.zoomToStep(step);
  document.getElementById("timeline-h")?.scrollIntoView({ behavior: "smooth" });
}
function showTime(ns) { const step = state.timeline?.stepOf(ns); if (step !== null && step !== undefined) showStep(step); }

render();
