/* rl-insight UI, ledger.js: the run's goodput ledger (docs/ledger.md, GET /api/v1/runs/{id}/ledger) drawn three ways:
   one sentence and one bar (the insight cards), a waterfall from all device time down to what trained the model, and
   the token ledger's sentence (the steps section). The answer is read at most every 30 s per run (a whole run's
   steps), shared by the cards and the step table.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api } from "./api.js";
import { h } from "./dom.js";

export const LEDGER_COLORS = { "training": "#16a34a", "generating": "#2563eb", "log-prob recompute": "#0891b2",
  "scoring": "#7c3aed", "weight sync": "#d97706", "tool calls": "#0d9488", "data": "#a16207", "checkpoint": "#4b5563",
  "validation": "#9333ea", "other work": "#64748b", "waiting: long-tail replica": "#f87171",
  "waiting: training": "#fdba74", "waiting: rollout": "#93c5fd", "waiting: weight sync": "#fcd34d",
  "waiting: tool calls": "#5eead4", "idle": "#cbd5e1", "lost: crash or restart": "#7f1d1d",
  "profiling overhead": "#be185d" };
const ds = (v) => v >= 100 ? v.toFixed(0) : v.toFixed(1);
const USEFUL = "training";

let cache = { key: null, at: 0, value: null, pending: null };
// The run's ledger, or a step range's (`steps`: "a-b", the page's range): cached 30 s per run and range.
export async function ledgerOf(runId, steps = null) {
  const key = `${runId}|${steps || ""}`;
  if (cache.key === key && cache.pending) return cache.pending;
  if (cache.key !== key || Date.now() - cache.at > 30_000) {
    const pending = api(`/api/v1/runs/${runId}/ledger${steps ? `?steps=${steps}` : ""}`).catch(() => null);
    cache = { key, at: Date.now(), value: null, pending };
    cache.value = await pending;
    cache.pending = null;
  }
  return cache.value;
}

// The sentence and a bar of the reasons (hover: each share).
export function ledgerLine(d) {
  if (!d || !d.steps.length) return null;
  const total = d.run.total || 1;
  const bar = h("div", { class: "ledger-bar", title: d.devices_note },
    ...Object.entries(d.run.reasons).filter(([, v]) => v > 0).map(([r, v]) => h("span", { "data-reason": r,
      title: `${r}: ${(100 * v / total).toFixed(1)} % (${ds(v)} device-s)`,
      style: `width:${(100 * v / total).toFixed(2)}%;background:${LEDGER_COLORS[r] || "#cbd5e1"}` })));
  return h("div", { id: "ledger", "data-goodput": d.goodput ?? "" }, h("div", { class: "ledger-sentence" }, d.sentence), bar);
}

// The price of a device-hour: the server's (`--gpu-hour-cost`), else the one typed on the run page (this browser's).
const PRICE_KEY = "rl-insight.gpu-hour-cost";
export function hourPrice(d) {
  if (d?.cost) return d.cost.per_device_hour;
  const typed = parseFloat(localStorage.getItem(PRICE_KEY) || "");
  return Number.isFinite(typed) && typed > 0 ? typed : null;
}

function priceInput(d, redraw) {
  if (d.cost) return h("span", { class: "muted" }, ` · ${d.cost.per_device_hour} a device-hour (the server's --gpu-hour-cost)`);
  const input = h("input", { id: "ledger-price", type: "number", min: "0", step: "any", placeholder: "price",
    value: hourPrice(d) ?? "", title: "a device-hour's price, kept in this browser (the server's --gpu-hour-cost sets it for everyone)",
    onchange: () => { const v = parseFloat(input.value); v > 0 ? localStorage.setItem(PRICE_KEY, String(v)) : localStorage.removeItem(PRICE_KEY); redraw(); } });
  return h("label", { class: "muted ledger-price" }, " · price a device-hour: ", input);
}

// From all device time to what trained the model: each other reason takes its share off, largest first; the last
// bar is the goodput. With a price per device-hour, each row says what it cost.
export function ledgerWaterfall(d, redraw = () => {}) {
  if (!d || !d.steps.length) return h("p", { class: "muted" }, "No complete step yet: the ledger counts whole steps.");
  const total = d.run.total || 1;
  const hour = hourPrice(d);
  const price = hour === null ? null : hour / 3600;
  const money = (v) => price === null ? "" : ` · ${(v * price).toPrecision(3)}`;
  const row = (label, from, width, color, value, cls) => h("div", { class: `lg-row ${cls}`, "data-reason": label,
    "data-share": (value / total).toFixed(6) },
    h("span", { class: "lg-label" }, label),
    h("span", { class: "lg-track" }, h("span", { class: "lg-bar", style: `left:${(100 * from / total).toFixed(2)}%;` +
      `width:${Math.max(0.2, 100 * width / total).toFixed(2)}%;background:${color}` })),
    h("span", { class: "lg-value" }, `${(100 * value / total).toFixed(1)} % · ${ds(value)} device-s${money(value)}`));
  const rows = [row("all device time", 0, total, "#94a3b8", total, "lg-total")];
  let left = total;
  for (const [r, v] of Object.entries(d.run.reasons).filter(([k, v]) => k !== USEFUL && v > 0).sort((a, b) => b[1] - a[1])) {
    left -= v;
    rows.push(row(r, left, v, LEDGER_COLORS[r] || "#cbd5e1", v, "lg-loss"));
  }
  const useful = d.run.reasons[USEFUL] || 0;
  rows.push(row("training", 0, useful, LEDGER_COLORS[USEFUL], useful, "lg-useful"));
  const trained = d.run.tokens.trained;
  const costs = price === null ? "" : ` Cost: ${(total * price).toPrecision(3)} in all, ${(total * price / d.steps.length).toPrecision(3)} a step` +
    (trained ? `, ${(total * price * 1000 / trained).toPrecision(3)} per 1,000 trained-on tokens` : "") + ".";
  return h("div", { id: "ledger-waterfall", "data-run-id": d.run_id, "data-goodput": d.goodput ?? "",
    "data-steps": d.steps.map(x => x.step).join(",") },
    h("p", {}, d.sentence, " ", h("span", { class: "muted" }, `(${d.devices_note})`), priceInput(d, redraw)), ...rows,
    h("p", { id: "ledger-tokens", "data-token-goodput": d.token_goodput ?? "" }, d.tokens_sentence, costs));
}
