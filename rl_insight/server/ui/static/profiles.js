/* rl-insight UI, profiles.js: profiles on request: ask, list, and the link from a profiled step to its analysis.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, canOperate, every, setUrlParams, state } from "./api.js";
import { h } from "./dom.js";
import { fmtDur } from "./format.js";
import { showStep } from "./timeline.js";

export class Profiles {
  constructor(el, run, timeline) {
    this.el = el; this.run = run; this.timeline = timeline; this.lanes = [];
    this.opsOpen = new Set();  // profiles whose operator tables the user opened: they stay open when the list redraws
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
      canOperate() ? h("button", { id: "profile-next", onclick: async () => this.request(String(await nextStep())) }, "Profile next step") : null,
      canOperate() ? h("button", { id: "profile-submit", onclick: () => this.request(this.stepsInput.value.trim()) }, "Profile these steps") : null, this.msg);
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
    this.timeline.profiledSteps = new Set(profiles.flatMap(p => Object.values(p.processes).flatMap(x => x.window?.steps || [])));
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
      links.push(h("button", { onclick: () => { this.opened = p.id; setUrlParams({ profile: p.id }); showStep(req.steps[0]); this.load(); },
        "data-link": "timeline" }, "on the timeline"));
      if ((p.state === "pending" || p.state === "running") && canOperate()) links.push(h("button", { onclick: () => this.cancel(p.id), "data-link": "cancel" }, "cancel"));
      const stages = a.state === "done" && a.stages?.length ? h("div", { class: "muted" }, "top stages: " +
        a.stages.slice(0, 4).map(s => `${s.name} ${fmtDur(s.total_s)}`).join(" · ")) : null;
      const opsTables = a.state === "done" ? operatorTables(a.operators || {}, p.id === this.opened || this.opsOpen.has(p.id),
        (open) => { open ? this.opsOpen.add(p.id) : this.opsOpen.delete(p.id); }) : null;
      return h("tr", { "data-profile": p.id, "data-state": p.state, class: p.id === this.opened ? "selected" : "" }, h("td", {}, h("code", {}, p.id)), h("td", {}, h("span", { class: `badge ${p.state}` }, p.state)),
        h("td", {}, `${req.steps[0]}${req.steps[1] !== req.steps[0] ? "–" + req.steps[1] : ""}`), h("td", {}, sel),
        h("td", {}, procs.length ? procs : h("span", { class: "muted" }, p.passed ? p.passed.message : "no process has taken it yet")), h("td", {}, ...links, stages, opsTables));
    });
    this.list.replaceChildren(h("table", { class: "grid" }, h("tr", {}, ...["request", "state", "steps", "who", "processes", ""].map(t => h("th", {}, t))), ...rows));
  }
}

// The profile's operators and kernels (analysis/operators.py): what torch's key_averages() and HTA's kernel breakdown
// say, beside the stage numbers: self time, calls, communication or compute, memory where the trace has it.
function operatorTables(o, open, onToggle) {
  const ops = o.operators || [], kernels = o.kernels || [];
  if (!ops.length && !kernels.length) return null;
  const mib = (b) => (b === null || b === undefined ? "–" : `${(b / 2 ** 20).toFixed(1)} MiB`);
  const kind = (r) => h("span", { class: `badge ${r.comm ? "comm" : "compute"}` }, r.comm ? "comm" : "compute");
  const table = (heads, rows) => h("table", { class: "grid ops" }, h("tr", {}, ...heads.map(t => h("th", {}, t))), ...rows);
  const totals = o.totals || {};
  const split = (t) => t ? ` — communication ${fmtDur(t.comm_s)}, compute ${fmtDur(t.compute_s)}` : "";
  // (the user's click, not the toggle event: that also fires for a table drawn open)
  return h("details", { class: "profile-ops", ...(open ? { open: "" } : {}) },
    h("summary", { onclick: (e) => onToggle(!e.currentTarget.parentElement.open) }, `operators and kernels (${ops.length} operators, ${kernels.length} kernels)`),
    ops.length ? h("div", {}, h("h4", {}, `CPU operators by self time${split(totals.operators)}`),
      table(["operator", "calls", "self", "total", "% of self", "", "peak allocated"], ops.slice(0, 15).map(r => h("tr", { "data-op": r.name },
        h("td", {}, h("code", { title: r.name }, r.name.length > 60 ? r.name.slice(0, 59) + "…" : r.name)), h("td", { class: "num" }, r.calls),
        h("td", { class: "num" }, fmtDur(r.self_s)), h("td", { class: "num" }, fmtDur(r.total_s)),
        h("td", { class: "num" }, `${r.self_pct.toFixed(1)} %`), h("td", {}, kind(r)), h("td", { class: "num" }, mib(r.peak_allocated_bytes)))))) : null,
    kernels.length ? h("div", {}, h("h4", {}, `device kernels by time${split(totals.kernels)}`),
      table(["kernel", "calls", "total", "mean", "max", "share", ""], kernels.slice(0, 15).map(r => h("tr", { "data-kernel": r.name },
        h("td", {}, h("code", { title: r.name }, r.name.length > 60 ? r.name.slice(0, 59) + "…" : r.name)), h("td", { class: "num" }, r.calls),
        h("td", { class: "num" }, fmtDur(r.total_s)), h("td", { class: "num" }, `${r.mean_us.toFixed(1)} µs`),
        h("td", { class: "num" }, `${r.max_us.toFixed(1)} µs`), h("td", { class: "num" }, `${r.share_pct.toFixed(1)} %`), h("td", {}, kind(r)))))) : null);
}
