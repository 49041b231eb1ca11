/* rl-insight UI, explain.js: why a step is as long as it is and where run B's time went (docs/explain.md):
   - the selected (or last) step's critical path as a chain, with what would save time (estimates), and the same
     path drawn over the timeline (timeline.critical);
   - on the compare view, the diff of the primary run and each compared run: its sentences (time, and where the
     extra device-seconds went by ledger reason), one table.
   Everything comes from the server (GET …/critical-path, /runs/diff); this module only draws it.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, state } from "./api.js";
import { h } from "./dom.js";
import { fmtDur } from "./format.js";
import { showStep } from "./timeline.js";

const signed = (s) => `${s >= 0 ? "+" : "−"}${fmtDur(Math.abs(s))}`;

// The step's critical path on `timeline` (drawn by timeline.js) and as a chain in `el`; `step` null: the last one.
export async function showCriticalPath(el, timeline, runId, step) {
  const q = step === null || step === undefined ? "" : `?step=${step}`;
  const p = await api(`/api/v1/runs/${runId}/critical-path${q}`).catch(() => null);
  if (timeline) { timeline.critical = p; if (timeline.view) timeline.draw(); }
  if (!el) return p;
  if (!p) {
    const running = step !== null && step !== undefined && timeline?.isRunning?.(step);
    el.replaceChildren(h("p", { class: "muted", id: "critical-path-none" }, running
      ? `Step ${step} is still running: its critical path comes when it ends (the timeline shows it up to now).`
      : step !== null && step !== undefined ? `No critical path for step ${step}: it has not ended, or its spans are gone.`
      : "No complete step yet: the critical path comes with the first one."));
    return p;
  }
  const w = p.what_if;
  const fixes = [
    ["the long-tail replica finishing with the others", w.tail_s, w.tail_lane],
    [`the slowest ${w.cut_percent} % of generations not waited for`, w.cut_s],
    ["the idle gaps on the path removed", w.bubbles_s],
  ].sort((a, b) => b[1] - a[1]);
  const chain = p.elements.map((e, i) => h("span", { class: "cp-el", "data-lane": e.lane, title: `slack ${fmtDur(e.slack_s)}` },
    i ? " → " : "", h("b", {}, e.name), ` ${e.lane} ${fmtDur(e.seconds)}`));
  el.replaceChildren(
    h("div", { class: "cp-head" }, h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); showStep(p.step); } }, `step ${p.step}`),
      ` (${fmtDur(p.duration_s)}): `, ...chain,
      p.bubbles_s > 0 ? h("span", { class: "muted" }, ` · idle on the path ${fmtDur(p.bubbles_s)}`) : ""),
    h("div", { class: "cp-whatif", id: "cp-whatif" }, "what would save time (estimates): ",
      ...fixes.map(([what, s, lane], i) => h("span", { class: i === 0 && s > 0 ? "best" : "", "data-saves-s": s }, i ? " · " : "",
        `${what}${lane ? " (" + lane + ")" : ""} ${s > 0 ? fmtDur(s) : "nothing"}`))),
    p.critical_trajectory ? h("div", { class: "muted" }, `critical trajectory: ${p.critical_trajectory.key} (${p.critical_trajectory.turns} turns)`) : "");
  el.dataset.step = p.step;
  return p;
}

// Compare: the primary run against each compared run, one sentence and one table each.
export async function renderDiffs(el, runId, compared) {
  const blocks = [];
  for (const other of compared) {
    const d = await api(`/api/v1/runs/diff?a=${runId}&b=${other.id}`).catch((e) => ({ error: e.message }));
    if (d.error) { blocks.push(h("p", { class: "error" }, `diff with run ${other.id}: ${d.error}`)); continue; }
    const stages = Object.entries(d.by_stage).slice(0, 6);
    const table = h("table", { class: "grid diff", "data-b": other.id },
      h("tr", {}, h("th", {}, "stage"), h("th", {}, "Δ a step (B − A)")),
      ...stages.map(([k, v]) => h("tr", { "data-stage": k }, h("td", {}, k), h("td", { class: v > 0 ? "worse" : v < 0 ? "better" : "" }, signed(v)))),
      h("tr", {}, h("th", {}, "lane class"), h("th", {}, "Δ busy a step")),
      ...Object.entries(d.by_class).map(([k, v]) => h("tr", { "data-class": k }, h("td", {}, k), h("td", {}, signed(v)))),
      ...(d.lanes.length ? [h("tr", {}, h("th", {}, "lanes that account for it"), h("th", {}, "Δ a step"))] : []),
      ...d.lanes.slice(0, 4).map(x => h("tr", { "data-lane": x.lane }, h("td", {}, x.lane,
        x.slowest_share_b ? h("span", { class: "muted" }, ` slowest in ${(100 * x.slowest_share_b).toFixed(0)} % of B's steps`) : ""),
        h("td", {}, signed(x.generation_delta_s ?? x.busy_delta_s ?? 0)))),
      // where B's extra device-hours went (the goodput ledger, docs/ledger.md)
      h("tr", {}, h("th", {}, "ledger reason"), h("th", {}, "Δ device-s a step")),
      ...Object.entries(d.ledger.by_reason).filter(([, v]) => Math.abs(v) > 1e-9).slice(0, 5).map(([k, v]) =>
        h("tr", { "data-reason": k }, h("td", {}, k), h("td", { class: v > 0 ? "worse" : "better" }, signed(v)))));
    blocks.push(h("div", { class: "diff-block", "data-b": other.id },
      h("p", { class: "diff-sentence" }, d.sentence), h("p", { class: "diff-ledger" }, d.ledger.sentence), table));
  }
  el.replaceChildren(...blocks);
}
