/* rl-insight UI, runs.js: the runs list a team reads — filters (search, project, status, tag), a summary metric and
   config columns, sortable columns, the alert badges — all kept in the address (#/?q=…&metric=…), so a filtered list
   can be shared. A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api, every, state } from "./api.js";
import { $, h } from "./dom.js";
import { ago } from "./format.js";

const SORTS = { run: "name", status: null, started: "first_seen", duration: "duration", "last step": "last_step",
                "last seen": "last_seen", metric: "metric" };

function readFilters() {
  const p = new URLSearchParams(location.hash.split("?")[1] || "");
  return { q: p.get("q") || "", project: p.get("project") || "", status: p.get("status") || "", tag: p.get("tag") || "",
           metric: p.get("metric") || "", config: p.get("config") || "", sort: p.get("sort") || "last_seen",
           order: p.get("order") || "desc" };
}

function writeFilters(f) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v && !(k === "sort" && v === "last_seen") && !(k === "order" && v === "desc")) p.set(k, v);
  const hash = `#/${p.toString() ? "?" + p : ""}`;
  if (location.hash !== hash) history.replaceState(null, "", hash);
}

function duration(s) {
  return s >= 3600 ? `${(s / 3600).toFixed(1)} h` : s >= 60 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`;
}
function cell(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v).slice(0, 60);
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(3).replace(/\.?0+e/, "e").replace("e+", "e");  // 3e-6
  return String(Number(v.toPrecision(4)));  // 0.74, 12.35
}

export async function renderRuns(app) {
  $("#crumbs").textContent = "runs";
  const f = readFilters();
  const selected = new Set();
  const table = h("table", { class: "grid", id: "runs-table" });
  const count = h("span", { class: "muted", id: "runs-count" });
  const compareBtn = h("button", { id: "compare", disabled: true, onclick: () => {
    const ids = [...selected]; location.hash = `#/run/${ids[0]}?compare=${ids.slice(1).join(",")}`; } }, "Compare selected");
  // filters as the person types (a quarter of a second after the last key), and at Enter or leaving the box
  let typing = null;
  const apply = (key, value) => { if (f[key] === value.trim()) return; f[key] = value.trim(); writeFilters(f); load(); };
  const input = (key, attrs) => h("input", { ...attrs, id: `runs-${key}`, value: f[key],
    oninput: (ev) => { clearTimeout(typing); typing = setTimeout(() => apply(key, ev.target.value), 250); },
    onchange: (ev) => { clearTimeout(typing); apply(key, ev.target.value); } });
  const choose = (key, label, options) => {
    const el = h("select", { id: `runs-${key}`, title: label, onchange: (ev) => { f[key] = ev.target.value; writeFilters(f); load(); } },
      h("option", { value: "" }, `${label}: all`), ...options.map(o => h("option", { value: o }, o)));
    el.value = f[key];
    return el;
  };
  const projectSel = choose("project", "project", []);
  const tagSel = choose("tag", "tag", []);
  const bar = h("div", { class: "bar runs-filters" },
    input("q", { type: "search", placeholder: "search runs and tags", "aria-label": "search runs and tags", size: 22 }),
    projectSel, choose("status", "status", ["live", "stalled", "hung", "idle", "finished", "lost"]), tagSel,
    input("metric", { placeholder: "summary metric, e.g. critic/score/mean", "aria-label": "summary metric", size: 30 }),
    input("config", { placeholder: "config columns, e.g. actor.lr", "aria-label": "config columns (comma-separated keys)", size: 24 }),
    compareBtn, count);
  app.replaceChildren(h("h2", {}, "Runs"), bar, h("div", { class: "runs-scroll" }, table));

  // the project and tag choices: every run's, whatever the filters (cheap: one unfiltered list)
  const fillChoices = (runs) => {
    const fill = (sel, values, key) => {
      const have = [...sel.options].slice(1).map(o => o.value).join("\u0000");
      const want = [...values].sort();
      if (have === want.join("\u0000")) return;
      sel.replaceChildren(sel.options[0], ...want.map(v => h("option", { value: v }, v)));
      sel.value = f[key];
    };
    fill(projectSel, new Set(runs.map(r => r.project)), "project");
    fill(tagSel, new Set(runs.flatMap(r => r.tags || [])), "tag");
  };

  let finishedOnly = false;
  const load = async () => {
    const params = new URLSearchParams();
    for (const k of ["q", "project", "status", "tag", "metric", "config", "sort", "order"]) if (f[k]) params.set(k, f[k]);
    let runs, all;
    try {
      [{ runs }, { runs: all }] = await Promise.all([api(`/api/v1/runs?${params}`), api("/api/v1/runs")]);
    } catch (e) {
      table.replaceChildren(h("tr", {}, h("td", { class: "error" }, String(e.message))));
      return;
    }
    fillChoices(all);
    state.runNames = Object.fromEntries(all.map(r => [r.id, `${r.project}/${r.experiment_name}`]));
    finishedOnly = all.length > 0 && all.every(r => r.status === "finished" || r.status === "lost");
    const firing = await runAlerts();
    const keys = f.config ? f.config.split(",").map(s => s.trim()).filter(Boolean) : [];
    const heads = ["", "run", "status", "tags", "alerts", "started", "duration", "last step", "last seen",
                   ...(f.metric ? ["metric"] : []), ...keys];
    table.replaceChildren(h("tr", {}, heads.map((name) => {
      const key = name === "metric" ? "metric" : SORTS[name];
      const num = name === "metric" || keys.includes(name);
      if (!key) return h("th", { class: num ? "num" : null }, name === "metric" ? f.metric : name);
      const on = f.sort === key;
      return h("th", { class: `sortable${on ? " sorted" : ""}${num ? " num" : ""}`, "data-sort": key, title: "sort by this column",
                       onclick: () => { f.order = on && f.order === "desc" ? "asc" : "desc"; f.sort = key; writeFilters(f); load(); } },
        name === "metric" ? f.metric : name, on ? (f.order === "desc" ? " ▾" : " ▴") : "");
    })));
    const filtered = ["q", "project", "status", "tag"].some(k => f[k]);
    count.textContent = filtered ? `${runs.length} of ${all.length} runs` : `${runs.length} runs`;
    if (!runs.length) {
      table.append(h("tr", {}, h("td", { colspan: heads.length, class: "muted" }, filtered
        ? "No run matches these filters."
        : "No runs yet: point RL_INSIGHT_SERVER_URL here, or run `rl-insight demo`.")));
    }
    for (const r of runs) {
      const box = h("input", { type: "checkbox", "aria-label": `select ${r.project}/${r.experiment_name}`,
        onclick: (ev) => { ev.stopPropagation(); box.checked ? selected.add(r.id) : selected.delete(r.id);
          compareBtn.disabled = selected.size < 2; } });
      if (selected.has(r.id)) box.checked = true;
      const started = new Date(r.first_seen * 1000);
      table.append(h("tr", { "data-run-id": r.id, onclick: () => { location.hash = `#/run/${r.id}`; } },
        h("td", {}, box),
        h("td", { class: "run-name" }, h("span", { class: "muted" }, `${r.project || "–"}/`), r.experiment_name || "–"),
        h("td", {}, h("span", { class: `badge ${r.status}`, title: r.why || "" }, r.status),
          r.archived ? h("span", { class: "badge archived", title: "its scrape targets are archived (rl-insight server experiments restore)" }, "archived") : null),
        h("td", { class: "tags" }, (r.tags || []).length ? r.tags.map(t => h("span", { class: "tag", onclick: (ev) => {
          ev.stopPropagation(); f.tag = t; writeFilters(f); tagSel.value = t; load(); } }, t)) : h("span", { class: "muted" }, "–")),
        h("td", { class: "alerts-cell" }, alertBadges(firing.get(`${r.project}\u0000${r.experiment_name}`))),
        h("td", { title: started.toISOString() }, started.toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hour12: false })),
        h("td", {}, duration(r.duration_s)),
        h("td", {}, r.last_step ?? "–"),
        h("td", { title: new Date(r.last_seen * 1000).toISOString() }, ago(r.last_seen)),
        ...(f.metric ? [h("td", { class: "num" }, cell(r.metric))] : []),
        ...keys.map(k => h("td", { class: "num" }, cell((r.config_values || {})[k])))));
    }
  };
  await load();
  // a list of finished runs changes only when a new run starts: poll it slowly
  every(5000, () => (finishedOnly && Date.now() % 30000 >= 5000 ? null : load()));
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
