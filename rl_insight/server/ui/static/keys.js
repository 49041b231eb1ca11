/* rl-insight UI, keys.js: the run page's keyboard: [ and ] the previous / next step, W / S zoom the timeline in / out,
   A / D pan it (Perfetto's keys), / the metric search, Esc closes or clears, ? lists them all. Keys typed into a field
   stay the field's (Esc excepted: it leaves the field).
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { setUrlParams, state } from "./api.js";
import { $, h } from "./dom.js";
import { redrawMarks } from "./plot.js";
import { showStep } from "./timeline.js";

export const SHORTCUTS = [
  ["[ / ]", "the previous / next step (selects it everywhere)"],
  ["W / S", "zoom the timeline in / out"],
  ["A / D", "pan the timeline left / right"],
  ["/", "search the metrics"],
  ["Esc", "close this help, leave a field, or clear the selected step"],
  ["?", "this list"],
];

function stepBy(dir) {
  const known = (state.stepTable?.steps || []).map(s => s.step).sort((a, b) => a - b);
  if (!known.length) return;
  const cur = state.selectedStep ?? known[known.length - 1], i = known.indexOf(cur);
  const next = dir > 0 ? known[Math.min(known.length - 1, i < 0 ? known.length - 1 : i + 1)] : known[Math.max(0, i < 0 ? 0 : i - 1)];
  showStep(next, { scroll: false });
}

function toggleHelp(show) {
  let el = $("#shortcuts");
  if (!el) {
    el = h("div", { id: "shortcuts", class: "shortcuts", role: "dialog", "aria-label": "keyboard shortcuts", hidden: "" },
      h("h3", {}, "Keyboard shortcuts"), h("table", {}, ...SHORTCUTS.map(([k, what]) => h("tr", {}, h("td", {}, h("kbd", {}, k)), h("td", {}, what)))),
      h("p", { class: "muted" }, "Esc or ? closes this."));
    document.body.append(el);
  }
  el.hidden = show === undefined ? !el.hidden : !show;
}

function clearStep() {
  if (state.selectedStep === null || state.selectedStep === undefined) return;
  state.selectedStep = null;
  setUrlParams({ step: null });
  (state.onStep || []).forEach(fn => fn(null));
  redrawMarks();
}

export function keyboard(e) {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const typing = e.target.closest?.("input, textarea, select");
  if (e.key === "Escape") {
    const help = $("#shortcuts");
    if (help && !help.hidden) toggleHelp(false);
    else if (typing) e.target.blur();
    else { $("#tooltip").hidden = true; clearStep(); }
    return;
  }
  if (typing) return;
  const tl = state.timeline;
  const act = {
    "[": () => stepBy(-1), "]": () => stepBy(1),
    w: () => tl?.view && tl.zoomBy(0.8), s: () => tl?.view && tl.zoomBy(1.25),
    a: () => tl?.view && tl.panBy(-0.2), d: () => tl?.view && tl.panBy(0.2),
    "/": () => { const f = $("#metric-search"); if (f) { f.scrollIntoView({ block: "center" }); f.focus(); } },
    "?": () => toggleHelp(),
  }[e.key.length === 1 ? e.key.toLowerCase() : e.key];
  if (!act) return;
  e.preventDefault();
  act();
}
