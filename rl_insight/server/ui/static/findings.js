// The run's findings (GET /api/v1/runs/{id}/findings; docs/findings.md): a card on the first screen, when there are any, naming what the
// detectors found — a hung job, a lane that makes every step slower — open ones first; a click shows the finding's
// last step on the timeline with its lane banded over the steps concerned (timeline.js drawFinding).
import { api, state } from "./api.js";
import { h } from "./dom.js";
import { fmtDur } from "./format.js";
import { showStep } from "./timeline.js";

export async function findingsCard(runId, card) {
  const answer = await api(`/api/v1/runs/${runId}/findings`).catch(() => null);
  const found = answer?.findings || [];
  const line = (f, i) => h("li", { class: `finding${f.open ? " open" : ""}`, "data-kind": f.kind, "data-subject": f.subject,
    "data-cause": f.cause, id: `finding-${i}`, title: f.sentence,
    onclick: (e) => { e.stopPropagation(); markFinding(f); } },
    h("b", {}, f.subject), ` · ${f.kind} · ${f.cause}`,
    f.excess_s ? ` · +${fmtDur(f.excess_s)} a step` : "",
    f.first_step !== null && f.first_step !== undefined ? ` · steps ${f.first_step}–${f.last_step}` : "",
    f.open ? "" : h("span", { class: "muted" }, " (ended)"));
  // (none: no card, so a healthy run's first screen is as it was)
  return found.length ? card("findings", h("ol", { class: "findings" }, ...found.slice(0, 5).map(line)), "insight-findings", true)
    : null;
}

// The finding on the timeline: its last step shown, its lane banded from its first step's start to its last's end.
export async function markFinding(f) {
  const t = state.timeline;
  if (!t || f.last_step === null || f.last_step === undefined) return;
  await showStep(f.last_step);
  const first = t.stepRange(f.first_step), last = t.stepRange(f.last_step);
  t.finding = { lane: f.subject, kind: f.kind, from_ns: (first || last)?.[0], to_ns: last?.[1] };
  if (t.view && t.data) t.draw();
}
