/* rl-insight UI, runs.js: the runs list and its alert badges.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, every, state } from "./api.js";
import { $, h } from "./dom.js";
import { ago } from "./format.js";

export async function renderRuns(app) {
  $("#crumbs").textContent = "runs";
  const selected = new Set();
  const table = h("table", { class: "grid", id: "runs-table" });
  const compareBtn = h("button", { id: "compare", disabled: true, onclick: () => {
    const ids = [...selected]; location.hash = `#/run/${ids[0]}?compare=${ids.slice(1).join(",")}`; } }, "Compare selected");
  app.replaceChildren(h("h2", {}, "Runs"), h("div", { class: "bar" }, compareBtn), table);
  const load = async () => {
    const { runs } = await api("/api/v1/runs");
    state.runNames = Object.fromEntries(runs.map(r => [r.id, `${r.project}/${r.experiment_name}`]));
    const firing = await runAlerts();
    table.replaceChildren(h("tr", {}, h("th", {}, ""), h("th", {}, "project"), h("th", {}, "experiment"), h("th", {}, "status"),
      h("th", {}, "alerts"), h("th", {}, "last step"), h("th", {}, "last seen")));
    if (!runs.length) table.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No runs yet: point RL_INSIGHT_SERVER_URL here, or run `rl-insight demo`.")));
    for (const r of runs) {
      const box = h("input", { type: "checkbox", onclick: (ev) => { ev.stopPropagation(); box.checked ? selected.add(r.id) : selected.delete(r.id);
        compareBtn.disabled = selected.size < 2; } });
      if (selected.has(r.id)) box.checked = true;
      table.append(h("tr", { "data-run-id": r.id, onclick: () => { location.hash = `#/run/${r.id}`; } },
        h("td", {}, box), h("td", {}, r.project || "–"), h("td", {}, r.experiment_name || "–"),
        h("td", {}, h("span", { class: `badge ${r.status}` }, r.status),
          r.archived ? h("span", { class: "badge archived", title: "its scrape targets are archived (rl-insight server experiments restore)" }, "archived") : null),
        h("td", { class: "alerts-cell" }, alertBadges(firing.get(`${r.project}\u0000${r.experiment_name}`))),
        h("td", {}, r.last_step ?? "–"), h("td", { title: new Date(r.last_seen * 1000).toISOString() }, ago(r.last_seen))));
    }
  };
  await load();
  every(5000, load);
}

// Alerts per run (labels project/experiment_name), from the server's view of Prometheus' rules.
async function runAlerts() {
  const byRun = new Map();
  try {
    const a = await api("/api/v1/alerts");
    for (const x of [...a.active, ...a.recent]) {
      const k = `${x.labels.project}\u0000${x.labels.experiment_name}`;
      if (!byRun.has(k)) byRun.set(k, []);
      byRun.get(k).push(x);
    }
  } catch (e) { /* the runs list works without Prometheus */ }
  return byRun;
}
function alertBadges(list) {
  if (!list || !list.length) return h("span", { class: "muted" }, "–");
  const n = (st) => list.filter(a => a.state === st).length;
  const names = [...new Set(list.map(a => `${a.alertname} (${a.state})`))].join("\n");
  return h("span", { title: names },
    n("firing") ? h("span", { class: "badge firing", "data-firing": n("firing") }, `${n("firing")} firing`) : null,
    n("pending") ? h("span", { class: "badge pending" }, `${n("pending")} pending`) : null,
    n("resolved") ? h("span", { class: "badge resolved" }, `${n("resolved")} resolved`) : null);
}
