/* rl-insight UI, run_page.js: a run page: insights, targets, config, alerts, and the places the other parts are drawn into.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { AlertingPanel } from "./alerting.js";
import { api, canOperate, clearTimers, every, state } from "./api.js";
import { ChartGrid } from "./charts.js";
import { HeadlineCharts } from "./headline.js";
import { $, h } from "./dom.js";
import { ago, fmtDur, fmtNum, isLive } from "./format.js";
import { compareLanes } from "./lanes.js";
import { PromSections } from "./panels.js";
import { Profiles } from "./profiles.js";
import { StackSnapshots, verdictBox, verdictClass } from "./stacks.js";
import { StepTable } from "./steps.js";
import { renderDiffs, showCriticalPath } from "./explain.js";
import { findingsCard } from "./findings.js";
import { keyboard } from "./keys.js";
import { ledgerLine, ledgerOf } from "./ledger.js";
import { renderMoe } from "./moe.js";
import { currentRange, rangeFromParams } from "./range.js";
import { RangeBar } from "./range_bar.js";
import { paletteReady } from "./colors.js";
import { Timeline, showStep } from "./timeline.js";
import { Trajectories } from "./trajectories.js";

// The page's view comes from its address (#/run/N?compare=…&step=…&steps=…|last=…|from=…&to=…&refresh=…&q=…&traj…):
// a reload or a shared link opens the same view.
export async function renderRun(app, runId, params) {
  const compareIds = (params.get("compare") || "").split(",").filter(x => /^\d+$/.test(x)).map(Number);
  const step = /^\d+$/.test(params.get("step") || "") ? +params.get("step") : null;
  const run = await api(`/api/v1/runs/${runId}`);
  // compared runs are named by project/experiment everywhere, even when the page was opened by URL
  const others = await Promise.all(compareIds.map(id => api(`/api/v1/runs/${id}`).catch(() => null)));
  state.runNames = { ...(state.runNames || {}), [run.id]: `${run.project}/${run.experiment_name}`,
    ...Object.fromEntries(others.filter(Boolean).map(r => [r.id, `${r.project}/${r.experiment_name}`])) };
  const compared = others.filter(Boolean);
  $("#crumbs").replaceChildren(h("a", { href: "#/" }, "runs"), " / ", `${run.project} / ${run.experiment_name}`);
  const header = h("div", { class: "bar", id: "run-header" });
  state.alerting = compared.length ? null : new AlertingPanel(run);  // who is told: in the header, and under it
  const insightsEl = h("div", { class: "cards", id: "insights" });
  const stepsEl = h("div", { id: "step-table" });
  const ledgerEl = h("div", { id: "ledger-box" });  // the goodput ledger's waterfall, above the step table
  const explainEl = h("div", { id: "explain-step", class: "explain" });
  const diffEl = h("div", { id: "compare-diff" });
  state.selectedStep = step;
  state.range = rangeFromParams(params);
  state.onStep = []; state.onRange = []; state.stepTable = null;
  document.onkeydown = keyboard;  // from the start: the keys act on what has loaded (steps once the table has)
  const rangeEl = h("div", { id: "range" });
  const timelineEl = h("div", { id: "timeline" });
  const chartsEl = h("div", { id: "charts" });
  const moeEl = h("div", { id: "moe", class: "explain", hidden: "" });
  const moeHead = h("h3", { id: "moe-h", hidden: "" }, "MoE expert load ", h("span", { class: "muted" },
    "(verl's rollout/moe/* load-balance metrics: which layer and expert get more than their share)"));
  const alertsEl = h("div", { id: "alerts" });
  const promEl = h("div", { id: "prom-sections" });
  const targetsEl = h("div", { id: "targets" });
  const profilesEl = h("div", { id: "profiles" });
  const stacksEl = h("div", { id: "stacks" });
  const trajectoriesEl = h("div", { id: "trajectories" });
  const headlineEl = h("div", { id: "headline", class: "headline-charts" });
  // the page's sections, in the top bar: the first screen is the run's verdict, its charts and its timeline
  $("#page-nav").replaceChildren(...[["insights", "insights"], ["timeline-h", "timeline"], ["steps-details", "steps"],
    ["trajectories-h", "trajectories"], ["stacks-h", "stacks"], ["profiles-h", "profiles"], ["metrics-h", "metrics"],
    ["prom-h", "engine · hardware"], ["run-config", "config"], ["targets-h", "targets"]].map(([id, t]) => h("a", { href: `#/run/${runId}`,
    onclick: (e) => { e.preventDefault(); document.getElementById(id)?.scrollIntoView(); } }, t)));
  // compare: one column of insight cards per run, one timeline per run stacked (a step click aligns them all)
  const cmpCards = compared.map(r => ({ run: r, el: h("div", { class: "cards", "data-run-id": r.id }) }));
  const cmpProm = compared.map(r => ({ run: r, el: h("div", { class: "prom-sections", "data-run-id": r.id }) }));
  const cmpTimelines = compared.map(r => ({ run: r, el: h("div", { class: "timeline", "data-run-id": r.id }) }));
  const insightsBlock = compared.length
    ? h("div", { class: "compare-cols", id: "compare-insights" }, h("div", {}, h("h4", {}, state.runNames[run.id]), insightsEl),
        ...cmpCards.map(c => h("div", {}, h("h4", {}, state.runNames[c.run.id]), c.el)))
    : insightsEl;
  app.replaceChildren(h("h2", {}, `${run.project} / ${run.experiment_name}`, ...(run.tags || []).map(t => h("span", { class: "tag" }, t)),
      compared.length ? h("span", { class: "muted" }, " compared with ", compared.map(r => state.runNames[r.id]).join(", ")) : null),
    header, state.alerting ? state.alerting.el : "", rangeEl, alertsEl,
    compared.length ? h("h3", { id: "diff-h" }, "Where the time went ", h("span", { class: "muted" },
      "(each compared run against this one, steps aligned by number; docs/explain.md)")) : "", diffEl,
    h("h3", { id: "insights-h" }, "Insights ", h("span", { class: "muted" }, "(the page's range, else the last 5 minutes; a selected step's own numbers)")), insightsBlock,
    headlineEl,
    h("h3", { id: "timeline-h" }, "RL state timeline ", h("span", { class: "muted" }, "wheel: zoom · drag: pan · double-click: reset"
      + (compared.length ? " · click a step to show that step in every run" : ""))),
    compared.length ? h("h4", {}, state.runNames[run.id]) : "", timelineEl,  // replaceChildren would print a null
    ...cmpTimelines.flatMap(t => [h("h4", {}, state.runNames[t.run.id]), t.el]),
    // below the timeline it outlines (filled after the timeline: nothing above it moves when it arrives)
    h("h3", { id: "explain-h" }, "Critical path ", h("span", { class: "muted" }, "what the step waited on, in order (outlined on "
      + "the timeline); the selected step, else the last")), explainEl,
    h("details", { id: "steps-details", open: "" }, h("summary", {}, "Steps, slowest first ", h("span", { class: "muted" },
      "click a row (or press [ and ]) to select that step everywhere")), ledgerEl, stepsEl),
    renderConfig(run, compared),
    h("h3", { id: "trajectories-h" }, "Agent-loop trajectories ", h("span", { class: "muted" }, "per step: click a column to sort, a row for its "
      + "turns; the long-tail card opens the trajectories that kept its replica busy")), trajectoriesEl,
    h("h3", { id: "stacks-h" }, "Stack snapshots ", h("span", { class: "muted" }, "where every thread of every process is now, "
      + "grouped; the odd ones out named (a hung or stalled job)")), stacksEl,
    h("h3", { id: "profiles-h" }, "Profiles ", h("span", { class: "muted" }, "torch.profiler on request: click lane names on the "
      + "timeline to choose them, pick the steps; the trace comes back analysed")), profilesEl,
    moeHead, moeEl,
    h("h3", { id: "metrics-h" }, "Trainer metrics"), chartsEl,
    h("h3", { id: "prom-h" }, "Rollout engine, TransferQueue and hardware ", h("span", { class: "muted" }, "(from Prometheus, the same queries as the Grafana dashboards)")),
    compared.length ? h("h4", {}, state.runNames[run.id]) : "", promEl,
    ...cmpProm.flatMap(c => [h("h4", {}, state.runNames[c.run.id]), c.el]),
    h("h3", { id: "targets-h" }, "Scrape targets"), targetsEl);

  const setHeader = (r) => (state.runStatus = r.status, header.replaceChildren(
    h("span", { class: `badge ${r.status}`, id: "run-status", title: r.lost ? r.lost.reason : r.why || "" }, r.status),
    r.lost ? h("span", { class: "lost-why", id: "run-lost" }, `${r.lost.reason}` + (r.lost.lanes.length ? `; open then: ${r.lost.lanes.join(", ")}` : "")) : "",
    r.why ? h("span", { class: "lost-why", id: "run-why" }, r.why) : "",
    h("span", {}, "last step ", h("b", { id: "last-step" }, r.last_step ?? "–")),
    h("span", { class: "muted", id: "run-meta" }, `run ${r.id} · started ${new Date(r.first_seen * 1000).toLocaleString([], { hour12: false })}`
      + ` · ran ${fmtDur(Math.max(0, r.last_seen - r.first_seen))} · last seen ${ago(r.last_seen)}`),
    h("a", { class: "button", id: "export-csv", href: `/api/v1/runs/${runId}/export.csv` }, "Export metrics (CSV)"),
    h("a", { class: "button", id: "export-trace", href: `/api/v1/runs/${runId}/trace.json` }, "Export timeline (Perfetto JSON)"),
    state.alerting ? state.alerting.inline : ""));
  setHeader(run);

  // a finished run changes rarely (a late resend, a profile's analysis): every 30 s unless the address says otherwise
  const ended = run.status === "finished" || run.status === "lost";
  const refreshMs = /^\d+$/.test(params.get("refresh") || "") ? +params.get("refresh") : ended ? 30000 : 3000;
  let chosenMs = refreshMs;  // (chosen before the loops below exist: they start with it)
  const rangeBar = new RangeBar(rangeEl, { refreshMs, onRefresh: (ms) => { chosenMs = ms; state.schedule?.(ms); } });
  await paletteReady;  // stage colours before the first draw
  state.timeline = new Timeline(timelineEl, runId, isLive(run.status) && (!state.range || !!state.range.last_s));
  state.timeline.laneFilter = state.timeline.filterBox.value = (params.get("lanes") || "").slice(0, 500);
  state.timeline.page = /^\d{1,6}$/.test(params.get("lane_page") || "") ? +params.get("lane_page") : 0;
  await state.timeline.load();  // first: the timeline is what people look at; insights may scan more data
  const headline = new HeadlineCharts(headlineEl, runId, compareIds);  // (its place is held: nothing moves when it draws)
  await headline.load().catch(() => {});
  if (state.range) { const { secs } = currentRange(); if (secs) state.timeline.setWindow([secs[0] * 1e9, secs[1] * 1e9], !!state.range.last_s); }
  state.onHoverTime = (sec) => state.timeline?.setHover(sec);
  state.timelines = [state.timeline];
  for (const t of cmpTimelines) { const tl = new Timeline(t.el, t.run.id, isLive(t.run.status)); state.timelines.push(tl); await tl.load(); }
  const profiles = state.profiles = new Profiles(profilesEl, run, state.timeline);
  profiles.opened = params.get("profile");
  await profiles.load();
  const stacks = state.stacks = new StackSnapshots(stacksEl, run, state.timeline);
  await stacks.load();
  if (/^[\w-]{1,64}$/.test(params.get("stacks") || "")) stacks.show(params.get("stacks")).catch(() => {});
  let lastStepNow = run.last_step;  // (the header's refresh keeps it current)
  const trajectories = state.trajectories = new Trajectories(trajectoriesEl, runId, { params, lastStep: () => lastStepNow });
  await trajectories.load().catch(e => trajectoriesEl.replaceChildren(h("p", { class: "error" }, `trajectories: ${e.message}`)));
  await renderInsights(insightsEl, runId);
  for (const c of cmpCards) await renderInsights(c.el, c.run.id, `r${c.run.id}-`);
  const steps = state.stepTable = new StepTable(stepsEl, runId, ledgerEl);
  await steps.load().catch(e => stepsEl.replaceChildren(h("p", { class: "error" }, `steps: ${e.message}`)));
  state.onStep.push(() => { renderInsights(insightsEl, runId).catch(() => {}); steps.draw(); refreshPaths(); });
  // the page's range moves the insight cards and the waterfall too, as it moves the charts and the timeline
  state.onRange.push(() => { renderInsights(insightsEl, runId).catch(() => {}); steps.load().catch(() => {}); });
  const refreshPaths = () => Promise.all((state.timelines || []).map((tl, i) =>
    showCriticalPath(i === 0 ? explainEl : null, tl, tl.runId, state.selectedStep))).catch(() => {});
  await refreshPaths();
  if (compared.length) await renderDiffs(diffEl, runId, compared).catch(e => diffEl.replaceChildren(h("p", { class: "error" }, e.message)));
  rangeBar.show();
  if (step !== null) showStep(step, { scroll: false });
  renderTargets(targetsEl, runId);
  state.alerting?.refresh();
  if (state.alerting) every(30_000, () => state.alerting.refresh());
  renderAlerts(alertsEl, runId);
  await renderMoe(moeEl, moeHead, runId);
  const charts = new ChartGrid(chartsEl, runId, compareIds, params.get("q") || "");
  await charts.load();
  const prom = state.prom = new PromSections(promEl, runId);
  await prom.load();
  for (const c of cmpProm) await new PromSections(c.el, c.run.id, `r${c.run.id}-`).load().catch(() => {});

  let headerStep = null;
  // what refreshes, at the base interval (3 s) times the chosen one / 3 s; "off" stops them all (the banner, too)
  const loops = [
    [1, async () => {
      const r = await api(`/api/v1/runs/${runId}?config=false`);
      setHeader(r); lastStepNow = r.last_step;
      if (r.last_step !== headerStep) { headerStep = r.last_step; await renderInsights(insightsEl, runId); }  // cards follow the header
      if (isLive(r.status)) { await headline.refresh(); await charts.refresh(); if (state.timeline.follow) await state.timeline.load(); }
      profiles.run = r; await profiles.load();
    }],
    [10 / 3, () => stacks.load()],
    [10 / 3, () => Promise.all([refreshPaths(), compared.length ? renderDiffs(diffEl, runId, compared) : null])],
    [10 / 3, async () => { if (isLive(run.status)) await trajectories.refresh(); }],
    [10 / 3, async () => { if (isLive(run.status)) await prom.refresh(); await renderAlerts(alertsEl, runId); }],
    [10 / 3, () => Promise.all([renderInsights(insightsEl, runId), steps.load().then(() => rangeBar.drawMinimap()),
      ...cmpCards.map(c => renderInsights(c.el, c.run.id, `r${c.run.id}-`))])],
    [5, () => renderTargets(targetsEl, runId)],
    [10 / 3, async () => { if (isLive(run.status)) await renderMoe(moeEl, moeHead, runId); }],
  ];
  state.schedule = (ms) => {
    clearTimers({ keepCharts: true });
    if (ms > 0) for (const [factor, fn] of loops) every(ms * factor, fn);
    state.refreshMs = ms;
  };
  state.schedule(chosenMs);
  rangeBar.drawMinimap();
}

async function renderInsights(el, runId, idPrefix = "") {
  const { secs } = idPrefix ? { secs: null } : currentRange();  // (the page's range; else the last 5 minutes)
  const s = await api(`/api/v1/runs/${runId}/insights?` + (secs
    ? `from_ns=${Math.round(Math.max(0, secs[0]) * 1e9)}&to_ns=${Math.round(secs[1] * 1e9)}` : "window_s=300"));
  el.dataset.window = secs ? `${secs[0]}-${secs[1]}` : "last 300 s";
  const card = (k, v, id, small, step) => h("div", { class: step !== undefined && step !== null ? "card link" : "card", id: idPrefix + id,
    "data-card": id,
    title: step !== undefined && step !== null ? `show step ${step} on the timeline` : null,
    onclick: step !== undefined && step !== null ? () => showStep(step) : null },
    h("div", { class: "k" }, k), h("div", { class: small ? "v small" : "v" }, v));
  // the selected step's own numbers when it is one of these steps (else the last); its card says "selected"
  const sel = idPrefix ? null : state.selectedStep;
  const pick = (list) => (sel !== null && sel !== undefined && list.find(x => x.step === sel)) || list[list.length - 1];
  if (sel !== null && sel !== undefined && !s.steps.some(x => x.step === sel)) {
    const older = await api(`/api/v1/runs/${runId}/insights?window_s=2592000&max_steps=1000000`).catch(() => null);
    if (older) { s.steps = older.steps; s.long_tail = older.long_tail; s.rollout_wait = older.rollout_wait; }
  }
  const lastStep = pick(s.steps);
  const tail = pick(s.long_tail);
  const selected = sel !== null && sel !== undefined && lastStep?.step === sel;
  // the selected step's own utilization and overlap: the insights of exactly its window
  const span = selected ? state.timeline?.stepRange(sel) : null;
  const own = span ? await api(`/api/v1/runs/${runId}/insights?from_ns=${span[0]}&to_ns=${span[1]}&max_steps=1`).catch(() => null) : null;
  if (own) { s.lanes = own.lanes; s.overlap = own.overlap; }
  const lanes = Object.entries(s.lanes).sort((a, b) => compareLanes(a[0], b[0]));
  const findings = idPrefix ? null : await findingsCard(runId, card);
  el.replaceChildren(
    ...(findings ? [findings] : []),
    card(`rollout–training overlap${own ? " (step " + sel + ")" : ""}`, `${(100 * s.overlap.overlap_ratio).toFixed(0)} %`, "insight-overlap"),
    card(`rollout long tail (${tail ? "step " + tail.step : "last step"})`, tail ? h("span", {}, `${tail.ratio.toFixed(2)}× · ${tail.slowest_lane}`,
      !idPrefix && state.trajectories?.steps?.includes(tail.step) ? h("button", { class: "mini link", id: "long-tail-trajectories", "data-lane": tail.slowest_lane, "data-step": tail.step,
        title: `the trajectories that kept ${tail.slowest_lane} busy at step ${tail.step}`,
        onclick: (e) => { e.stopPropagation(); state.trajectories.focus({ step: tail.step, replica: tail.slowest_lane }); } }, "trajectories ›") : null) : "–",
      "insight-long-tail", false, tail?.step),
    card("stalled lanes", h("span", {}, s.stalled.length ? s.stalled.map(x => `${x.lane}: ${x.state} ${fmtDur(x.open_s)}`).join(", ") : "none",
      idPrefix ? null : stalledStacks(s)), "insight-stalled", s.stalled.length > 0),
    card("staleness", s.staleness ? `mean ${fmtNum(s.staleness.mean)} · max ${fmtNum(s.staleness.max)}` : "not reported", "insight-staleness"),
    card(`rollout → training wait (${selected ? "step " + sel : "last step"})`, (w => w ? fmtDur(w.wait_s) : "–")(pick(s.rollout_wait || [])),
      "insight-wait"),
    card(`${selected ? "selected step" : "last step"}${lastStep ? " (" + lastStep.step + ", " + fmtDur(lastStep.duration_s) + (lastStep.profiled ? ", profiled: slower than usual" : "") + ")" : ""}`, lastStep
      ? h("div", {}, h("ol", { class: "breakdown" }, ...Object.entries(lastStep.states).sort((a, b) => b[1] - a[1]).map(([k, v]) =>
          h("li", {}, idPrefix || !canOperate() ? null : h("button", { class: "mini", "data-profile-stage": k, title: `profile ${k} at the next step`,
              onclick: (e) => { e.stopPropagation(); state.profiles?.requestStage(k); } }, "profile"),
            h("b", {}, `${(100 * v / (lastStep.duration_s || 1)).toFixed(0)}%`), ` ${k} `, h("span", { class: "dur" }, fmtDur(v))))),
          overlapNote(lastStep))
      : "–", "insight-step", true, lastStep?.step),
    card(`where the device time went · lane utilization${own ? " (step " + sel + ")" : ""}`, h("div", {},
      idPrefix ? null : ledgerLine(await ledgerOf(runId)),
      lanes.map(([l, v]) => `${l} ${(100 * v.utilization).toFixed(0)}%${v.stalled_s ? ` (stalled ${fmtDur(v.stalled_s)})` : ""}`).join(" · ") || "–"), "insight-utilization", true));
}

// States of one step overlap (separate-async: generation of step N+1 during training of step N; nested states):
// their shares then add up to more than 100 %, and the card says so instead of leaving a puzzle.
function overlapNote(step) {
  const total = Object.values(step.states).reduce((a, v) => a + v, 0) / (step.duration_s || 1);
  return total > 1.05 ? h("div", { class: "muted overlap-note", id: "breakdown-overlap" },
    `shares add up to ${(100 * total).toFixed(0)} %: states overlap in time (async generation, or concurrent lanes)`) : null;
}

// the stalled-lane card: the stack snapshot the server took by itself (or a button to take one)
function stalledStacks(s) {
  const snap = s.stack_snapshot;
  markCulprits(snap);
  if (snap) return h("div", { class: "card-stacks" }, h("button", { class: "mini link", id: "stalled-stacks", "data-snapshot": snap.id,
    title: snap.reason || "", onclick: (e) => { e.stopPropagation(); state.stacks?.show(snap.id); } }, "stacks ›"),
    snap.verdict ? verdictBox(snap.verdict, "short", "stalled-verdict") : null,
    h("div", { class: "stack-summary" }, snap.summary || "being collected …"));
  return s.stalled.length && canOperate() ? h("button", { class: "mini link", id: "stalled-take-stacks",
    onclick: (e) => { e.stopPropagation(); state.stacks?.take("stalled lanes"); document.getElementById("stacks-h")?.scrollIntoView(); } }, "take stacks ›") : null;
}

// A hang's culprits outlined on the timeline as soon as the verdict names them (no click; a snapshot the person opens
// takes the place, stacks.js): the link in a notification opens the hung step with the culprit lane marked.
function markCulprits(snap) {
  const t = state.timeline, v = snap?.verdict;
  if (!t || !v || !v.culprits?.length || !verdictClass(v).names_culprits) return;
  if (t.snapshot && t.snapshot.id !== snap.id) return;
  t.snapshot = { id: snap.id, t_ns: snap.created_at * 1e9, odd: v.culprits, verdict: true };
  if (t.view && t.data) t.draw();
}

async function renderTargets(el, runId) {
  const { targets } = await api(`/api/v1/runs/${runId}/targets`);
  const t = h("table", { class: "grid" }, h("tr", {}, h("th", {}, "job"), h("th", {}, "target"), h("th", {}, "labels"), h("th", {}, "health")));
  for (const x of targets) t.append(h("tr", {}, h("td", {}, x.job), h("td", {}, x.target),
    h("td", {}, Object.entries(x.labels).map(([k, v]) => `${k}=${v}`).join(", ")), h("td", {}, x.health ?? "unknown")));
  el.replaceChildren(targets.length ? t : h("p", { class: "muted" }, "No targets registered for this run."));
}

// What init(config=...) described (verl: the whole trainer config), searchable; comparing, one column per run and by
// default only the keys whose values differ (the rest is what the runs share).
function renderConfig(run, compared = []) {
  const runs = [run, ...compared], configs = runs.map(r => r.config || {});
  const keys = [...new Set(configs.flatMap(c => Object.keys(c)))].sort();
  if (!keys.length) return h("div", { id: "run-config", class: "muted" }, "No run config (pass config=… to rl_insight.init to see it here).");
  const differs = (k) => new Set(configs.map(c => (k in c ? JSON.stringify(c[k]) : "\u0000absent"))).size > 1;
  const nDiff = compared.length ? keys.filter(differs).length : 0;
  const only = compared.length ? h("input", { type: "checkbox", id: "config-diff-only", checked: "", onchange: () => fill() }) : null;
  const search = h("input", { type: "search", id: "config-search", placeholder: "filter keys and values", oninput: () => fill() });
  const rows = h("tbody");
  const cell = (c, k) => h("td", { class: k in c ? "" : "muted" }, k in c ? String(c[k]) : "(absent)");
  const fill = () => {
    const q = search.value.trim().toLowerCase();
    rows.replaceChildren(...keys.filter(k => (!only || !only.checked || differs(k))
      && (!q || k.toLowerCase().includes(q) || configs.some(c => String(c[k] ?? "").toLowerCase().includes(q))))
      .slice(0, 500).map(k => h("tr", { "data-key": k, class: compared.length && differs(k) ? "differs" : "" },
        h("td", { class: "key" }, k), ...configs.map(c => cell(c, k)))));
  };
  fill();
  const head = compared.length ? h("tr", {}, h("th", {}, "key"), ...runs.map(r => h("th", {}, state.runNames?.[r.id] || `run ${r.id}`))) : null;
  return h("details", { id: "run-config", open: compared.length ? "" : null },
    h("summary", {}, compared.length ? `Run config: ${nDiff} of ${keys.length} keys differ` : `Run config (${keys.length} keys)`),
    h("div", { class: "bar" }, search, only ? h("label", {}, only, " only the keys that differ") : null),
    h("table", { class: "grid config" }, head, rows));
}

// One entry per alert name and state, with how many instances (seven TargetDown are one line, not seven): the
// first instance's text, the others' summaries under it.
export function groupAlerts(list) {
  const groups = new Map();
  for (const x of list) {
    const key = `${x.alertname}\u0000${x.state}`;
    if (!groups.has(key)) groups.set(key, { ...x, count: 0, others: [] });
    const g = groups.get(key);
    g.count += 1;
    if (g.count > 1) g.others.push(x.summary);
    if (x.since && (!g.since || x.since < g.since)) g.since = x.since;  // since the earliest
  }
  return [...groups.values()];
}

// the step that was running when the alert began: a link that selects it (its time on the timeline, every chart)
function beganAt(x) {
  const ms = x.since ? Date.parse(x.since) : NaN;
  const step = Number.isFinite(ms) ? state.timeline?.stepOf(ms * 1e6) : null;
  return step === null || step === undefined ? null : h("a", { href: "#", class: "alert-step", "data-step": step,
    title: "select the step that was running when this alert began", onclick: (e) => { e.preventDefault(); showStep(step); } }, `began in step ${step}`);
}

async function renderAlerts(el, runId) {
  const a = await api(`/api/v1/runs/${runId}/alerts`).catch(() => null);
  const evaluated = a && a.prometheus.state === "ok";
  const item = (x) => h("div", { class: `alert ${x.state}`, "data-alert": x.alertname, "data-state": x.state, "data-count": x.count },
    h("div", { class: "head" }, h("span", { class: `badge ${x.state}` }, x.state), h("b", {}, x.alertname),
      x.count > 1 ? h("span", { class: "badge count" }, `× ${x.count}`) : null,
      x.severity ? h("span", { class: "muted" }, x.severity) : null,
      h("span", { class: "muted" }, x.since ? `since ${new Date(x.since).toLocaleTimeString([], { hour12: false })}`
        : x.last_firing ? `last fired ${ago(x.last_firing)}` : ""), beganAt(x)),
    h("div", {}, x.summary), x.others.length ? h("details", { class: "muted" }, h("summary", {}, `${x.others.length} more`),
      ...x.others.slice(0, 50).map(s => h("div", {}, s))) : null,
    x.description ? h("div", { class: "muted" }, x.description) : null,
    x.what_to_check ? h("div", { class: "check" }, h("b", {}, "What to check: "), x.what_to_check) : null,
    x.alertname === "RLInsightTrainerStalled" && x.state !== "resolved" && canOperate() ? h("button", { class: "mini link", "data-alert-stacks": "",
      onclick: () => { state.stacks?.take("trainer stalled alert"); document.getElementById("stacks-h")?.scrollIntoView(); } }, "take stacks ›") : null);
  if (!evaluated || (!a.active.length && !a.recent.length)) { el.replaceChildren(); return; }
  el.replaceChildren(h("h3", {}, "Alerts ", h("span", { class: "muted" }, `(firing and pending now; resolved within ${Math.round(a.recent_window_s / 60)} min)`)),
    ...groupAlerts(a.active).map(item), ...groupAlerts(a.recent).map(item));
}
