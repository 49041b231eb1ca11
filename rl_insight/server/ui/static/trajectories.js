/* rl-insight UI, trajectories.js: the run page's agent-loop trajectories (step -> trajectory -> turns).
   One step at a time: a sortable, filterable, paged table; the step's distributions; a trajectory's waterfall.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, every, setUrlParams } from "./api.js";
import { h } from "./dom.js";
import { fmtDur, fmtNum, fmtTick } from "./format.js";
import { compareLanes } from "./lanes.js";

const TRAJ_COLUMNS = [  // [sort key or null, header, cell]
  [null, "trajectory", t => h("span", { title: t.key }, t.key.startsWith("trace:") ? `trace ${t.key.slice(6, 14)}…` : t.key.replace(/^experiment=[^/]*\//, ""))],
  ["duration", "duration", t => t.duration_s === null ? "–" : fmtDur(t.duration_s)],
  ["turns", "turns", t => `${t.turns}${t.reported_turns !== null && t.reported_turns !== t.turns ? ` (${t.reported_turns} reported)` : ""}`],
  ["tool_calls", "tool calls", t => `${t.tool_calls}${t.tools.length ? " · " + t.tools.join(", ") : ""}`],
  ["tool_errors", "tool errors", t => t.tool_errors ? h("b", { class: "error" }, String(t.tool_errors)) : "0"],
  ["generate_s", "generate", t => t.generate_s === null ? "–" : fmtDur(t.generate_s)],
  ["tool_s", "in tools", t => t.tool_s === null ? "–" : fmtDur(t.tool_s)],
  ["tokens_out", "tokens in / out", t => `${t.tokens_in === null ? "–" : fmtTick(t.tokens_in)} / ${t.tokens_out === null ? "–" : fmtTick(t.tokens_out)}`],
  ["reward", "reward", t => fmtNum(t.reward)],
  [null, "status", t => h("span", { class: `badge ${/^(success|finished)$/.test(t.status || "finished") ? "done" : "failed"}` }, t.status || "–")],
  [null, "replica", t => t.replica || "–"],
  [null, "sample", (t, view) => t.sample === null ? "–" : h("a", { href: "#", class: "traj-sample", title: "this sample's trajectories (its rollout group)",
    onclick: (e) => { e.preventDefault(); e.stopPropagation(); view.set({ sample: t.sample, offset: 0 }); } }, t.sample)],
];
const PAGE = 50;

export class Trajectories {
  // params: the page's address (traj_step, traj_status, traj_tool, traj_replica, traj_failed, traj: the open one);
  // lastStep(): the run's last complete step (a live run's newest trajectory step may still be running)
  constructor(el, runId, { params = new URLSearchParams(), lastStep = () => null } = {}) {
    this.el = el; this.runId = runId; this.lastStep = lastStep;
    this.query = { step: null, sort: "duration", desc: true, status: "", tool: "", replica: "", failed: false, tool_errors: false,
      min_turns: "", sample: "", offset: 0 };
    const p = (k) => params.get(`traj_${k}`) || "";
    if (/^\d+$/.test(p("step"))) this.query.step = +p("step"); else if (p("step") === "none") this.query.step = "none";
    Object.assign(this.query, { status: p("status"), tool: p("tool"), replica: p("replica"), failed: p("failed") === "true",
      tool_errors: p("tool_errors") === "true" });
    if (/^\d+$/.test(params.get("traj") || "")) this.wanted = +params.get("traj");
    this.stepSel = h("select", { id: "traj-step", onchange: () => this.set({ step: this.stepSel.value === "none" ? "none" : Number(this.stepSel.value), offset: 0 }) });
    this.statusSel = h("select", { id: "traj-status", onchange: () => this.set({ status: this.statusSel.value, offset: 0 }) });
    this.toolSel = h("select", { id: "traj-tool", onchange: () => this.set({ tool: this.toolSel.value, offset: 0 }) });
    this.replicaSel = h("select", { id: "traj-replica", onchange: () => this.set({ replica: this.replicaSel.value, offset: 0 }) });
    this.failed = h("input", { type: "checkbox", id: "traj-failed", checked: this.query.failed ? "" : null,
      onchange: () => this.set({ failed: this.failed.checked, offset: 0 }) });
    this.toolErrors = h("input", { type: "checkbox", id: "traj-tool-errors", checked: this.query.tool_errors ? "" : null,
      onchange: () => this.set({ tool_errors: this.toolErrors.checked, offset: 0 }) });
    this.minTurns = h("input", { id: "traj-min-turns", size: 4, placeholder: "≥ turns", onchange: () => this.set({ min_turns: this.minTurns.value.trim(), offset: 0 }) });
    this.summary = h("span", { class: "muted", id: "traj-summary" });
    this.dists = h("div", { class: "cards traj-dists", id: "traj-dists" });
    this.table = h("div", { id: "traj-table" });
    this.waterfall = h("div", { id: "traj-waterfall" });
    this.bar = h("div", { class: "bar", id: "traj-controls" }, h("label", {}, "step ", this.stepSel), h("label", {}, "status ", this.statusSel),
      h("label", {}, "tool ", this.toolSel), h("label", {}, "replica ", this.replicaSel), h("label", { title: "ended failed: error, timeout, aborted, truncated …" }, this.failed, " failed only"),
      h("label", { title: "a tool call failed (the trajectory may still have succeeded)" }, this.toolErrors, " with tool errors"), this.minTurns,
      this.summary);
  }

  async load() {
    const { steps, without_step } = await api(`/api/v1/runs/${this.runId}/trajectories/steps`);
    this.steps = steps;
    if (!steps.length && !without_step) {
      this.el.replaceChildren(h("p", { class: "muted", id: "traj-empty" }, "No agent-loop trajectories in this run. They come from ",
        h("code", {}, "rl_insight.agent_loop_session"), " or from verl's rollout traces over OTLP (trace.backend=mlflow; see docs/otlp.md)."));
      return false;
    }
    // "none": trajectories no step could be given to (spans that arrived before the run's first step metric)
    // by default the newest complete step (the newest may still be running: its trajectories are not all there)
    const last = this.lastStep(), done = steps.find(s => last === null || last === undefined || s <= last);
    if (this.query.step === null || (this.query.step !== "none" && !steps.includes(this.query.step))) this.query.step = done ?? steps[0] ?? "none";
    this.stepSel.replaceChildren(...steps.map(s => h("option", { value: s }, `step ${s}`)),
      without_step ? h("option", { value: "none" }, "no step") : null);
    this.stepSel.value = this.query.step;
    if (!this.el.contains(this.bar)) this.el.replaceChildren(this.bar, this.dists, this.table, this.waterfall);
    await Promise.all([this.loadStats(), this.loadPage()]);
    return true;
  }

  /** While the run is live: new steps join the menu; a view on the newest step follows to the next one. */
  async refresh() {
    const { steps, without_step } = await api(`/api/v1/runs/${this.runId}/trajectories/steps`);
    if (!this.steps?.length) { if (steps.length || without_step) await this.load(); return; }
    if (steps[0] === this.steps[0]) return;
    const following = this.query.step === this.steps[0];
    if (following) Object.assign(this.query, { step: steps[0], offset: 0 });
    await this.load();
  }

  async set(changes) {
    Object.assign(this.query, changes);
    this.remember();
    await Promise.all([changes.step !== undefined ? this.loadStats() : null, this.loadPage()]);
  }
  // the view in the address: a reload or a shared link opens the same step, filters and trajectory
  remember() {
    const q = this.query;
    setUrlParams({ traj_step: q.step, traj_status: q.status, traj_tool: q.tool, traj_replica: q.replica, traj_failed: q.failed ? "true" : null,
      traj_tool_errors: q.tool_errors ? "true" : null,
      traj: this.selected ?? null });
  }

  /** From the long-tail card: which trajectories kept this replica busy at this step. */
  async focus({ step, replica }) {
    Object.assign(this.query, { step: step ?? this.query.step, replica: replica || "", sort: "duration", desc: true, offset: 0, status: "",
      tool: "", failed: false, tool_errors: false, sample: "", min_turns: "" });
    this.failed.checked = false; this.toolErrors.checked = false; this.minTurns.value = "";  // the controls the menus' refresh does not redraw
    document.getElementById("trajectories-h")?.scrollIntoView();
    await this.load();
    this.remember();
  }

  params() {
    const q = this.query, p = new URLSearchParams({ sort: q.sort, desc: q.desc, offset: q.offset, limit: PAGE });
    if (q.step === "none") p.set("no_step", "true"); else if (q.step !== null) p.set("step", q.step);
    for (const k of ["status", "tool", "replica", "min_turns", "sample"]) if (q[k] !== "" && q[k] !== null) p.set(k, q[k]);
    if (q.failed) p.set("failed", "true");
    if (q.tool_errors) p.set("tool_errors", "true");
    return p;
  }

  async loadStats() {
    const ticket = this.statsTicket = (this.statsTicket || 0) + 1;  // (the latest answer only, as loadPage)
    const s = await api(`/api/v1/runs/${this.runId}/trajectories/stats?${this.query.step === "none" ? "no_step=true" : "step=" + this.query.step}`);
    if (ticket !== this.statsTicket) return;
    this.stats = s;
    const options = (sel, values, current) => {
      sel.replaceChildren(h("option", { value: "" }, "all"), ...values.map(v => h("option", { value: v }, v)));
      if (current && !values.includes(current)) sel.append(h("option", { value: current }, current));
      sel.value = current || "";
    };
    options(this.statusSel, Object.keys(s.statuses).sort(), this.query.status);
    options(this.toolSel, s.tools.map(t => t.tool).sort(), this.query.tool);
    options(this.replicaSel, s.replicas.map(r => r.replica).sort((a, b) => compareLanes(a, b)), this.query.replica);
    const d = s.duration_s;
    const card = (k, v, id) => h("div", { class: "card", id }, h("div", { class: "k" }, k), v);
    this.dists.replaceChildren(
      card(`${s.step === null ? "no step" : "step " + s.step}: ${s.trajectories} trajectories`, h("div", { class: "v small" },
        d.p50 === null ? "–" : `p50 ${fmtDur(d.p50)} · p90 ${fmtDur(d.p90)} · p99 ${fmtDur(d.p99)} · max ${fmtDur(d.max)}`,
        h("br"), `${s.failed} failed · ${s.with_tool_errors ?? 0} with tool errors`), "traj-card-duration"),
      card("duration", histogram(s.duration, fmtDur), "traj-hist-duration"),
      card("turns per trajectory", histogram(s.turns, v => String(v)), "traj-hist-turns"),
      card("reward", histogram(s.reward, fmtNum), "traj-hist-reward"),
      card("tokens out per trajectory", histogram(s.tokens_out, fmtTick), "traj-hist-tokens"),
      card("tool latency by tool", s.tools.length ? h("table", { class: "mini-table", id: "traj-tools" },
        h("tr", {}, h("th", {}, "tool"), h("th", {}, "calls"), h("th", {}, "p50"), h("th", {}, "p99"), h("th", {}, "errors")),
        ...s.tools.map(t => h("tr", { "data-tool": t.tool }, h("td", {}, h("a", { href: "#", onclick: (e) => { e.preventDefault(); this.set({ tool: t.tool, offset: 0 }); this.toolSel.value = t.tool; } }, t.tool)),
          h("td", {}, t.calls), h("td", {}, fmtDur(t.p50_s)), h("td", {}, fmtDur(t.p99_s)), h("td", { class: t.errors ? "error" : "" }, t.errors))))
        : h("div", { class: "muted" }, "no tool calls"), "traj-card-tools"));
  }

  async loadPage() {
    // answers can come back out of order (a refresh in flight when the user sorts): only the latest one is drawn,
    // with the query it was asked with, so a header never says a sort its rows do not have
    const ticket = this.pageTicket = (this.pageTicket || 0) + 1;
    const q = { ...this.query };
    const p = await api(`/api/v1/runs/${this.runId}/trajectories?${this.params()}`);
    if (ticket !== this.pageTicket) return;
    this.page = p;
    const head = h("tr", {}, ...TRAJ_COLUMNS.map(([key, label]) => h("th", key ? {
      class: "sortable" + (q.sort === key ? " sorted" : ""), "data-sort": key, title: "sort",
      onclick: () => this.set({ sort: key, desc: q.sort === key ? !q.desc : key !== "reward", offset: 0 }) } : {},
      label, key && q.sort === key ? (q.desc ? " ▼" : " ▲") : "")));
    const rows = p.trajectories.map(t => h("tr", { "data-traj-id": t.id, class: this.selected === t.id ? "selected" : "",
      onclick: () => this.show(t.id).then(() => this.remember()) }, ...TRAJ_COLUMNS.map(([, , cell]) => h("td", {}, cell(t, this)))));
    const last = Math.min(p.total, q.offset + p.trajectories.length);
    this.summary.textContent = p.total ? `${q.offset + 1}–${last} of ${p.total}` : "no trajectory matches";
    const pager = h("div", { class: "bar" },
      h("button", { id: "traj-prev", disabled: q.offset === 0 ? "" : null, onclick: () => this.set({ offset: Math.max(0, q.offset - PAGE) }) }, "‹ previous"),
      h("button", { id: "traj-next", disabled: last >= p.total ? "" : null, onclick: () => this.set({ offset: q.offset + PAGE }) }, "next ›"),
      q.replica ? h("span", { class: "muted" }, `trajectories that ran on ${q.replica} at step ${p.step}, slowest first`) : null,
      q.sample ? h("button", { id: "traj-sample-clear", title: "show every sample again", onclick: () => this.set({ sample: "", offset: 0 }) },
        `sample ${q.sample} ✕`) : null);
    // a live refresh redraws the rows where the reader left them (the box keeps its scroll position)
    const box = this.table.querySelector(".traj-rows"), keep = box ? box.scrollTop : 0;
    const rowsBox = h("div", { class: "traj-rows" }, h("table", { class: "grid traj", "data-step": String(p.step) }, head, ...rows));
    this.table.replaceChildren(rowsBox, pager);
    rowsBox.scrollTop = keep;
    if (this.wanted !== undefined) { const id = this.wanted; delete this.wanted; await this.show(id).catch(() => this.show(p.trajectories[0]?.id)); }
    else if (p.trajectories.length && !p.trajectories.some(t => t.id === this.selected)) await this.show(p.trajectories[0].id);
    else if (!p.trajectories.length) this.waterfall.replaceChildren();
  }

  /** A trajectory's turns as bars on its own time axis: generate → tool → generate …, gaps visible. */
  async show(id) {
    if (id === undefined) return;
    this.selected = id;
    this.table.querySelectorAll("tr[data-traj-id]").forEach(tr => tr.classList.toggle("selected", Number(tr.dataset.trajId) === id));
    const t = await api(`/api/v1/runs/${this.runId}/trajectories/${id}`);
    const t0 = t.start_ns, total = Math.max(1, (t.end_ns ?? t0) - t0);
    const pct = (ns) => `${(100 * (ns - t0) / total).toFixed(3)}%`;
    const width = (a, b) => `${Math.max(0.15, 100 * (b - a) / total).toFixed(3)}%`;
    const label = (x) => {
      const dur = fmtDur((x.end_ns - x.start_ns) / 1e9);
      if (x.kind === "tool") return `${x.name} ${dur}${x.error ? " ✗ " + x.error : ""}`;
      const e = x.engine, tok = x.tokens_out !== null ? ` · ${x.tokens_in ?? "?"}→${x.tokens_out} tok` : "";
      return `generate ${dur}${tok}${x.replica ? " · " + x.replica : ""}${e && e.queue_s !== null ? ` · queued ${fmtDur(e.queue_s)}` : ""}`
        + (x.detail.finish_reason ? ` · ${x.detail.finish_reason}` : "");
    };
    const textBeside = (x, text) => {
      const before = 100 * (x.start_ns - t0) / total, after = 100 - 100 * (x.end_ns - t0) / total;
      const side = after >= before ? `left:calc(${(100 - after).toFixed(3)}% + 2px)`
        : `right:calc(${(100 - before).toFixed(3)}% + 2px)`;
      return h("span", { class: "wf-text", style: `${side};max-width:calc(${Math.max(after, before).toFixed(3)}% - 2px)` },
        text);
    };
    const io = turnTexts(t.turn_list);
    const rows = t.turn_list.map((x, i) => h("div", { class: "wf-row", "data-kind": x.kind, "data-turn": i,
      onclick: () => { const d = io.querySelector(`details[data-turn="${i}"]`); if (d) { d.open = true; d.scrollIntoView({ block: "nearest" }); } } },
      h("div", { class: "wf-label" }, `${i + 1}. ${x.kind === "tool" ? "tool" : "generate"}`),
      h("div", { class: "wf-track" }, ...t.gaps.map(g => h("div", { class: "wf-gap", style: `left:${pct(g.start_ns)};width:${width(g.start_ns, g.end_ns)}` })),
        h("div", { class: `wf-bar ${x.kind}${x.error ? " err" : ""}`, style: `left:${pct(x.start_ns)};width:${width(x.start_ns, x.end_ns)}`,
          title: `${label(x)}\nstarts +${fmtDur((x.start_ns - t0) / 1e9)}${x.request_id ? "\nrequest " + x.request_id : ""}` }),
        // text on the side of the bar with more room, cut to that room (an ellipsis; the bar's title has it whole):
        // a long bar's text never runs past the track's edge and widens the page
        textBeside(x, label(x)))));
    this.waterfall.replaceChildren(h("h4", {}, `trajectory ${t.key}`),
      h("div", { class: "muted", id: "traj-wf-summary" }, `${fmtDur(t.duration_s ?? 0)} · ${t.turns} turns · generate ${fmtDur(t.generate_s ?? 0)} · `
        + `tools ${fmtDur(t.tool_s ?? 0)} · between turns ${fmtDur(t.gap_s)}${t.reward !== null ? ` · reward ${fmtNum(t.reward)}` : ""}`
        + `${t.step !== null ? ` · step ${t.step}` : ""}`),
      h("div", { class: "waterfall", id: "traj-wf" }, ...rows), io);
  }
}

// What each turn said, when the job sent it: the prompt and response of a generate, a tool's arguments and result
// (verl's MLflow spans: their inputs and outputs). One collapsible block per turn with text, the first one open;
// a click on a waterfall row opens its block. Text only (textContent): a prompt that holds HTML stays text.
const TEXT_FIELDS = [["prompt", "prompt"], ["response", "response"], ["tool_args", "arguments"], ["tool_result", "result"],
  ["input", "input"], ["output", "output"]];
function turnTexts(turns) {
  const blocks = turns.map((x, i) => {
    const parts = TEXT_FIELDS.filter(([k]) => typeof x.detail?.[k] === "string" && x.detail[k] !== "");
    if (!parts.length) return null;
    const size = parts.reduce((n, [k]) => n + x.detail[k].length, 0);
    return h("details", { class: "turn-io", "data-turn": i },
      h("summary", {}, `${i + 1}. ${x.kind === "tool" ? `tool ${x.name}` : "generate"}`, h("span", { class: "muted" }, ` · ${size} characters`)),
      ...parts.flatMap(([k, label]) => [h("div", { class: "io-label" }, label), h("pre", { class: "io-text", "data-field": k }, x.detail[k])]));
  }).filter(Boolean);
  const left = turns.some(x => x.detail?.text_left_out);
  if (!blocks.length && !left) return h("div", { id: "traj-io", class: "muted" }, "No prompt or response text: pass prompt= and response= to "
    + "agent_loop_session(...).generation, tool_args= and tool_result= to .tool_call, to read each turn here.");
  if (blocks.length) blocks[0].open = true;
  return h("div", { id: "traj-io" }, h("h4", {}, "Turns' text"), ...blocks,
    left ? h("p", { class: "muted", id: "traj-io-left-out" }, "Later turns' text is left out: this trajectory's text passed 2 MiB.") : null);
}

/** Bars of a histogram {edges, counts}, as a small SVG with the first and last edges under it. */
function histogram(hist, fmt) {
  if (!hist.counts.length) return h("div", { class: "muted" }, "not reported");
  const max = Math.max(...hist.counts), n = hist.counts.length, W = 200, H = 48;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`); svg.setAttribute("class", "hist");
  hist.counts.forEach((c, i) => {
    const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    const bh = max ? Math.max(c ? 1 : 0, H * c / max) : 0;
    r.setAttribute("x", (W * i / n + 0.5).toFixed(1)); r.setAttribute("width", Math.max(1, W / n - 1).toFixed(1));
    r.setAttribute("y", (H - bh).toFixed(1)); r.setAttribute("height", bh.toFixed(1));
    const tip = document.createElementNS("http://www.w3.org/2000/svg", "title");
    tip.textContent = `${fmt(hist.edges[i])} – ${fmt(hist.edges[i + 1])}: ${c}`;
    r.append(tip); svg.append(r);
  });
  return h("div", {}, svg, h("div", { class: "hist-axis muted" }, h("span", {}, fmt(hist.edges[0])), h("span", {}, fmt(hist.edges[hist.edges.length - 1]))));
}
