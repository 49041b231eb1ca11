/* rl-insight UI, stacks.js: stack snapshots of the run: take one (a button, or the stalled-lane card), read the
   groups with the odd ones out named, and see where each lane was at that moment on the timeline.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, canOperate, setUrlParams, state } from "./api.js";
import { setRange } from "./range.js";
import { h } from "./dom.js";

const FRAMES_SHOWN = 14;

export class StackSnapshots {
  constructor(el, run, timeline) {
    this.el = el; this.run = run; this.timeline = timeline; this.open = new Set(); this.shown = new Map();
    this.native = h("input", { type: "checkbox", id: "stacks-native" });
    this.msg = h("span", { class: "muted", id: "stacks-msg" });
    this.list = h("div", { id: "stacks-list" });
    el.replaceChildren(h("div", { class: "bar" },
      canOperate() ? h("button", { id: "stacks-take", onclick: () => this.take() }, "Take a stack snapshot") : null,
      h("label", { title: "native frames through py-spy, where the job's environment has it and ptrace is permitted" }, this.native, " native frames"),
      this.lanesNote(), this.msg), this.list);
  }
  lanesNote() {
    return h("span", { class: "muted" }, "every process of the run answers from its sender thread; lanes chosen on the timeline narrow it");
  }
  async take(reason = "") {
    const lanes = [...(this.timeline.selected || [])];
    this.msg.textContent = "asking the run's processes …";
    try {
      const s = await api(`/api/v1/runs/${this.run.id}/stacks`, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ lanes, native: this.native.checked }) });
      this.msg.textContent = `asked ${s.expected_count} process${s.expected_count === 1 ? "" : "es"}${reason ? " (" + reason + ")" : ""}; an idle one answers within its 10 s heartbeat`;
      this.open.add(s.id);
      await this.load();
      const poll = setInterval(async () => {
        const x = await api(`/api/v1/runs/${this.run.id}/stacks/${s.id}`).catch(() => null);
        if (!x || x.state !== "pending") { clearInterval(poll); this.msg.textContent = ""; await this.load().catch(() => {}); }
      }, 1000);
    } catch (e) { this.msg.textContent = `not taken: ${e.message}`; }
  }
  async show(id) {  // from the stalled-lane card (or the address): open it, and show its moment everywhere
    this.open.add(id);
    setUrlParams({ stacks: id });
    await this.load();
    const s = this.shown.get(id);
    if (s && this.timeline) setRange({ secs: [s.created_at - 60, s.created_at + 15] });
    document.getElementById(`stack-${id}`)?.scrollIntoView();
  }
  async load() {
    const { snapshots } = await api(`/api/v1/runs/${this.run.id}/stacks`).catch(() => ({ snapshots: [] }));
    const items = [];
    for (const s of snapshots.slice(0, 20)) {
      const full = s.state === "complete" && this.open.has(s.id) ? await this.full(s.id) : null;
      items.push(this.item(s, full));
    }
    this.list.replaceChildren(...(items.length ? items : [h("p", { class: "muted" }, "No stack snapshots of this run yet.")]));
    this.mark(snapshots.find(s => this.open.has(s.id) && s.state === "complete"));
  }
  async full(id) {
    if (!this.shown.has(id)) this.shown.set(id, await api(`/api/v1/runs/${this.run.id}/stacks/${id}`));
    return this.shown.get(id);
  }
  item(s, full) {
    const when = new Date(s.created_at * 1000).toLocaleTimeString([], { hour12: false });
    const head = h("summary", {}, h("span", { class: `badge ${s.state === "complete" ? "done" : "pending"}` }, s.state),
      h("b", {}, ` ${when} `), h("span", { class: "muted" }, `${s.origin === "auto" ? "automatic · " : ""}${s.answered}/${s.expected_count} answered · `),
      h("span", { class: "stack-summary" }, s.summary || "collecting …"));
    const details = h("details", { class: "stack-snap", id: `stack-${s.id}`, "data-snapshot": s.id, "data-state": s.state, open: full ? "" : null,
      ontoggle: async (e) => { if (e.target.open && !this.open.has(s.id)) { this.open.add(s.id); await this.load(); }
        else if (!e.target.open && this.open.has(s.id)) { this.open.delete(s.id); this.mark(null); } } }, head);
    if (s.reason) details.append(h("div", { class: "muted" }, `why: ${s.reason}`));
    if (s.verdict) details.append(verdictBox(s.verdict, full ? "full" : "short", `verdict-${s.id}`));
    if (full) details.append(...full.groups.map((g, i) => this.group(g, i, full)));
    return details;
  }
  group(g, i, snap) {
    const now = snap.completed_at * 1e9;
    const tag = g.odd_one_out ? h("span", { class: "badge failed odd" }, "odd one out") : !g.answered ? h("span", { class: "badge expired" }, "no answer") : null;
    const members = g.members.slice(0, 8).map(m => h("li", {}, h("b", {}, m.label), " ",
      (m.states || []).map(st => `${st.lane === m.label ? "" : st.lane + " "}in ${st.state} for ${fmtS(now - st.since_ns)}`).join(", "),
      m.last_seen_ns ? h("span", { class: "muted" }, ` · last seen ${fmtS(now - m.last_seen_ns)} ago`) : null,
      m.rss_bytes ? h("span", { class: "muted" }, ` · ${m.step !== null && m.step !== undefined ? "step " + m.step + " · " : ""}RSS ${fmtBytes(m.rss_bytes)} · CPU ${Math.round(m.cpu_s || 0)} s`) : null));
    const frames = (g.frames || []).slice(-FRAMES_SHOWN).map(f => `${f.file}:${f.line}  ${f.func}${f.code ? "\n      " + f.code : ""}`).join("\n");
    const native = (g.native || []).filter(f => f.line === 0).slice(-4).reverse().map(f => `${f.func} (${f.file.split("/").pop()})`).join(" ← ");
    return h("div", { class: `stack-group${g.odd_one_out ? " odd" : ""}`, "data-group": i, "data-labels": g.labels },
      h("div", {}, h("b", {}, `${g.size} × ${g.labels}`), " ", tag, g.where ? h("span", {}, ` in ${g.where.text}`) : null),
      h("ul", { class: "members" }, ...members, g.members.length > 8 ? h("li", { class: "muted" }, `… ${g.members.length - 8} more`) : null),
      frames ? h("pre", { class: "frames" }, frames) : null,
      native ? h("div", { class: "muted native" }, `native (py-spy): ${native}`) : null);
  }
  mark(s) {  // the snapshot on the timeline: a line at its moment, the odd ones' lanes outlined
    if (!this.timeline) return;
    const full = s && this.shown.get(s.id);
    this.timeline.snapshot = full ? { id: s.id, t_ns: full.created_at * 1e9,
      odd: full.groups.filter(g => g.odd_one_out || !g.answered).flatMap(g => g.members.flatMap(m => (m.states || []).map(x => x.lane))) } : null;
    if (this.timeline.view) this.timeline.draw();
  }
}

// A snapshot's verdict (server/rooms/stacks/verdict.py): its sentence, marked as a hang when its class is one (the
// classes come from the server: GET /api/v1/session's verdict_classes), and (opened) the evidence and what to check next.
export const verdictClass = (v) => state.session?.verdict_classes?.[v?.class] || {};
export function verdictBox(v, detail, id) {
  const box = h("div", { class: `verdict${verdictClass(v).hang ? " hung" : ""}`, id, "data-class": v.class },
    h("b", {}, v.sentence));
  if (detail === "full") {
    if (v.evidence.length) box.append(h("div", { class: "muted" }, "evidence"), h("ul", {}, ...v.evidence.map(e => h("li", {}, e))));
    if (v.next.length) box.append(h("div", { class: "muted" }, "check next"), h("ul", {}, ...v.next.map(n => h("li", {}, n))));
  }
  return box;
}

function fmtBytes(b) { return b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${Math.round(b / 2 ** 20)} MiB`; }
function fmtS(ns) { const s = Math.max(0, ns / 1e9); return s < 120 ? `${s.toFixed(0)} s` : `${(s / 60).toFixed(1)} min`; }
