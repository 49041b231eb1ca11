/* rl-insight UI, alerting.js: on the run page's alerts card, who is told (docs/alerts.md): whether notifications are on,
   this run's silences (who set them, until when; end one), and "alert me when" a metric crosses a value or jumps (a
   rule the managed Prometheus evaluates). One element, built once per page and refreshed on its own: the alerts card
   re-renders every few seconds around it without losing what someone is typing. */
import { api, canOperate } from "./api.js";
import { h } from "./dom.js";

const hhmm = (iso) => new Date(iso).toLocaleTimeString([], { hour12: false, hour: "2-digit", minute: "2-digit" });

export class AlertingPanel {
  // two elements: `inline`, a few words in the run's header line saying who is told (the first screen keeps its charts and
  // timeline: nothing here takes a line of its own until someone asks for it), and `el`, the block under the header
  // with the silences and rules of the run (only when there are some) and, once they are clicked, the status in
  // words, "silence 2 h" and "alert me when…"
  constructor(run) {
    this.run = run;
    this.el = h("div", { id: "alerting" });
    this.status = h("a", { href: "#", id: "alerting-status", class: "muted", onclick: (e) => { e.preventDefault(); this.controls.hidden = !this.controls.hidden; } });
    this.help = h("span", { class: "muted notifications" });
    this.silences = h("div", { class: "silences" });
    this.rules = h("div", { class: "user-rules" });
    this.msg = h("div", { class: "muted", id: "alerting-msg" });
    this.metric = h("input", { id: "rule-metric", list: "rule-metrics", placeholder: "metric, e.g. reward/mean" });
    this.names = h("datalist", { id: "rule-metrics" });
    this.op = h("select", { id: "rule-op" }, ...[["below", "drops below"], ["above", "rises above"], ["change", "jumps by σ"]]
      .map(([v, t]) => h("option", { value: v }, t)));
    this.value = h("input", { id: "rule-value", type: "number", step: "any", placeholder: "value / σ" });
    this.steps = h("input", { id: "rule-steps", type: "number", min: "1", value: "3", title: "for this many steps "
      + "(a jump: over this many steps' mean and deviation)" });
    this.form = h("div", { id: "rule-form", class: "bar", hidden: "" }, h("b", {}, "Alert me when"), this.metric, this.names, this.op,
      this.value, h("span", { class: "muted" }, "for"), this.steps, h("span", { class: "muted" }, "steps"),
      h("button", { id: "rule-add", class: "mini", onclick: () => this.addRule() }, "Add rule"));
    this.silenceBtn = h("button", { id: "silence-run", class: "mini link", onclick: () => this.silence() }, "silence 2 h");
    this.ruleBtn = h("button", { id: "rule-toggle", class: "mini link", onclick: () => { this.form.hidden = !this.form.hidden; } },
      "alert me when…");
    this.inline = h("span", { id: "alerting-inline" }, this.status);
    // (a viewer's page has none of the controls that change who is told)
    this.controls = h("div", { class: "bar", hidden: "" }, this.help, ...(canOperate() ? [this.silenceBtn, this.ruleBtn] : []));
    this.el.append(this.controls, this.silences, this.rules, this.form, this.msg);
  }

  async refresh() {
    const n = await api("/api/v1/alerting").catch(() => null);
    if (!n) return;
    this.el.dataset.notifications = !n.enabled ? "off" : n.receivers ? "on" : "no-receiver";
    this.status.textContent = `notify: ${!n.enabled ? "off" : n.receivers ? `${n.receivers} receiver${n.receivers > 1 ? "s" : ""}` : "no receiver"} ›`;
    this.status.title = this.help.textContent = `Notifications ${n.message}`;
    this.silenceBtn.hidden = !n.enabled;
    if (n.enabled) {
      const { silences } = await api(`/api/v1/alerting/silences?run_id=${this.run.id}`).catch(() => ({ silences: [] }));
      this.silences.replaceChildren(...silences.map(s => h("div", { class: "silence", "data-silence": s.id },
        h("span", { class: "badge silenced" }, "silenced"),
        ` ${s.matchers.alertname || (s.matchers.experiment_name ? "this run" : `project ${s.matchers.project}`)} by ${s.created_by}`
        + ` until ${hhmm(s.ends_at)}${s.comment ? ` — ${s.comment}` : ""} `,
        canOperate() ? h("button", { class: "mini link", onclick: () => this.unsilence(s.id) }, "end") : null)));
      this.silenceBtn.hidden = silences.some(s => s.matchers.experiment_name && !s.matchers.alertname);
    }
    const rules = await api("/api/v1/alerting/rules").catch(() => null);
    this.ruleBtn.hidden = rules === null;
    const mine = (rules?.rules || []).filter(r => (!r.project || r.project === this.run.project)
      && (!r.experiment_name || r.experiment_name === this.run.experiment_name));
    this.rules.replaceChildren(...mine.map(r => h("div", { class: "user-rule", "data-rule": r.name },
      h("b", {}, r.name), ` ${r.description} `,
      n.enabled && canOperate() ? h("button", { class: "mini link", "data-silence-rule": r.name, onclick: () => this.silence(r.name) }, "silence 2 h") : null,
      canOperate() ? h("button", { class: "mini link", onclick: () => this.removeRule(r.name) }, "remove") : null)));
    if (!this.names.children.length) {
      const { metrics } = await api(`/api/v1/runs/${this.run.id}/metrics`).catch(() => ({ metrics: [] }));
      this.names.replaceChildren(...[...new Set(metrics.map(m => m.logged || m.name))].sort().map(n => h("option", { value: n })));
    }
  }

  async act(what, fn) {
    this.msg.textContent = `${what}…`;
    try { this.msg.textContent = await fn(); } catch (e) { this.msg.textContent = e.message; }
    await this.refresh();
  }

  // the whole run, or one alert of it (a rule's)
  silence(alertname = null) {
    return this.act("silencing", async () => {
      const s = await api("/api/v1/alerting/silences", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ run_id: this.run.id, duration_s: 7200, alertname, comment: "silenced from the run page" }) });
      return `${alertname || "this run"} silenced until ${hhmm(s.ends_at)}`;
    });
  }

  unsilence(id) {
    return this.act("ending the silence", async () => (await api(`/api/v1/alerting/silences/${id}`, { method: "DELETE" })).message);
  }

  addRule() {
    const op = this.op.value, value = parseFloat(this.value.value), steps = parseInt(this.steps.value, 10) || 1;
    if (!this.metric.value || !Number.isFinite(value)) { this.msg.textContent = "a metric and a value, please"; return null; }
    const name = `${this.metric.value.replace(/[^A-Za-z0-9_]+/g, "_").replace(/^(\d)/, "_$1")}_${op}`.slice(0, 64);
    const body = op === "change"
      ? { name, metric: this.metric.value, kind: "change", sigma: value, window_steps: Math.max(steps, 5), run_id: this.run.id }
      : { name, metric: this.metric.value, kind: "threshold", op, value, for_steps: steps, run_id: this.run.id };
    return this.act("adding the rule", async () => {
      const r = await api("/api/v1/alerting/rules?replace=true", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body) });
      return `rule ${r.name} added: ${r.description}`;
    });
  }

  removeRule(name) {
    return this.act("removing the rule", async () => (await api(`/api/v1/alerting/rules/${name}`, { method: "DELETE" })).message);
  }
}
