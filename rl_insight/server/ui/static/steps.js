/* rl-insight UI, steps.js: the run's steps in a sortable table (slowest first): duration, generation, training,
   rollout → training wait, the slowest replica and its tail ratio, the bubbles (the share of lane time idle in the
   step), the ledger's columns (device-seconds, goodput, the largest reason that did not train, trained-on tokens,
   and with a price the step's cost), and whether a profiler disturbed it; a row selects its step everywhere
   (showStep). Above it, the run's ledger as a waterfall (ledger.js).
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, state } from "./api.js";
import { h } from "./dom.js";
import { fmtDur } from "./format.js";
import { hourPrice, ledgerOf, ledgerWaterfall } from "./ledger.js";
import { showStep } from "./timeline.js";

const GEN = /generate|rollout/i;
const COLUMNS = [
  ["step", "step", (s) => s.step],
  ["duration", "duration_s", (s) => s.duration_s],
  ["generation", "gen_s", (s) => s.gen_s],
  ["training", "train_s", (s) => s.train_s],
  ["rollout → training wait", "wait_s", (s) => s.wait_s],
  ["slowest replica", "tail_lane", (s) => s.tail_lane],
  ["tail ratio", "tail_ratio", (s) => s.tail_ratio],
  ["bubbles", "bubble_ratio", (s) => s.bubble_ratio],
  ["device-s", "device_s", (s) => s.device_s],
  ["goodput", "goodput", (s) => s.goodput],
  ["largest loss", "loss", (s) => s.loss],
  ["trained tokens", "trained_tokens", (s) => s.trained_tokens],
];
const COST = ["cost", "cost", (s) => s.cost];

export class StepTable {
  constructor(el, runId, ledgerEl = null) {
    this.el = el; this.runId = runId; this.steps = []; this.sort = ["duration_s", -1]; this.ledger = null; this.ledgerEl = ledgerEl;
  }
  async load() {
    const [s, ledger] = await Promise.all([api(`/api/v1/runs/${this.runId}/insights?window_s=2592000&max_steps=1000`),
      ledgerOf(this.runId)]);
    this.ledger = ledger;
    // the waterfall follows the page's step range (the table keeps every step, the range's highlighted by the minimap)
    const range = state.rangeNow?.()?.steps;
    this.waterfall = range ? await ledgerOf(this.runId, `${range[0]}-${range[1]}`) : ledger;
    const byStep = new Map((ledger?.steps || []).map(x => [x.step, x]));
    const wait = new Map((s.rollout_wait || []).map(w => [w.step, w.wait_s]));
    const tail = new Map((s.long_tail || []).map(t => [t.step, t]));
    this.steps = s.steps.map(x => {
      const states = Object.entries(x.states || {});
      const sum = (f) => states.filter(([k]) => f(k)).reduce((a, [, v]) => a + v, 0);
      return { step: x.step, duration_s: x.duration_s, gen_s: sum(k => GEN.test(k)), train_s: sum(k => !GEN.test(k)),
        wait_s: wait.get(x.step) ?? null, tail_lane: tail.get(x.step)?.slowest_lane ?? null,
        tail_ratio: tail.get(x.step)?.ratio ?? null, bubble_ratio: x.bubble_ratio ?? null, profiled: !!x.profiled,
        ...ledgerColumns(byStep.get(x.step)) };
    });
    this.draw();
  }
  draw() {
    const [key, dir] = this.sort;
    const price = hourPrice(this.ledger);
    for (const r of this.steps) r.cost = price !== null && r.device_s !== null ? r.device_s * price / 3600 : null;
    const columns = price !== null ? [...COLUMNS, COST] : COLUMNS;
    const rows = [...this.steps].sort((a, b) => ((a[key] ?? -Infinity) > (b[key] ?? -Infinity) ? 1 : -1) * dir);
    if (!rows.length) { this.el.replaceChildren(h("p", { class: "muted" }, "No complete step yet.")); return; }
    const fmt = (k, v) => v === null || v === undefined ? "–" : k === "step" || k === "tail_lane" || k === "loss" ? String(v)
      : k === "tail_ratio" ? `${v.toFixed(2)}×` : k === "bubble_ratio" || k === "goodput" ? `${(100 * v).toFixed(0)} %`
      : k === "device_s" ? v.toFixed(1) : k === "trained_tokens" ? Math.round(v).toLocaleString("en") : k === "cost" ? v.toPrecision(3) : fmtDur(v);
    const head = h("tr", {}, ...columns.map(([label, k]) => h("th", { class: `sortable${k === key ? " sorted" : ""}`, "data-sort": k,
      onclick: () => { this.sort = [k, k === key ? -dir : -1]; this.draw(); } }, label + (k === key ? (dir < 0 ? " ▼" : " ▲") : ""))));
    const body = rows.slice(0, 200).map(r => h("tr", { "data-step": r.step, class: r.step === state.selectedStep ? "selected" : "",
      onclick: () => showStep(r.step) },
      ...columns.map(([, k]) => h("td", { "data-col": k }, fmt(k, r[k]), k === "step" && r.profiled ? h("span", { class: "muted" }, " (profiled)") : null))));
    const more = rows.length > 200 ? [h("p", { class: "muted" }, `${rows.length - 200} more steps (sort to see them)`)] : [];
    this.ledgerEl?.replaceChildren(ledgerWaterfall(this.waterfall ?? this.ledger, () => this.draw()));
    this.el.replaceChildren(h("table", { class: "grid steps" }, head, ...body), ...more);  // (a null would print)
  }
}

// A step's ledger (GET …/ledger) as the table's columns: its device-seconds, the share that trained, the reason that
// took most of the rest, its trained-on tokens and (with a price) its cost.
function ledgerColumns(l) {
  if (!l) return { device_s: null, goodput: null, loss: null, trained_tokens: null, cost: null };  // (cost: at draw)
  const rest = Object.entries(l.reasons).filter(([r]) => r !== "training").sort((a, b) => b[1] - a[1])[0];
  return { device_s: l.total, goodput: l.total > 0 ? (l.reasons.training || 0) / l.total : null,
    loss: rest && rest[1] > 0 ? rest[0] : null, trained_tokens: l.tokens?.trained ?? null, cost: null };
}
