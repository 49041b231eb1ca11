/* rl-insight UI, main.js: the UI's entry point (`<script type="module">`): routing between the runs list and a run page, and the login.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { ApiError, api, clearTimers, state } from "./api.js";
import { colorOf } from "./colors.js";
import { showStep } from "./timeline.js";
import { $, h } from "./dom.js";
import { fmtTick, fmtUnit, timeTicks, yRange } from "./format.js";
import { groupAlerts, renderRun } from "./run_page.js";
import { renderRuns } from "./runs.js";

export async function render() {
  clearTimers();
  state.refreshMs = null;  // (a run page sets its own; the banner's watchdog runs unless it is "off")
  const app = $("#app");
  if (!state.session) state.session = await (await fetch("/api/v1/session", { credentials: "same-origin" })).json();
  $("#page-nav").replaceChildren();  // (a run page fills it with its sections)
  const links = $("#links");
  links.replaceChildren();
  // Prometheus and Grafana see every project: not offered to a token held to projects (docs/access.md)
  const everyProject = !state.session.projects;
  if (state.session.prometheus_url && everyProject) links.append(h("a", { href: state.session.prometheus_url, target: "_blank", id: "link-prometheus" }, "Prometheus"));
  if (state.session.grafana_url && everyProject) links.append(h("a", { href: state.session.grafana_url, target: "_blank", id: "link-grafana" }, "Grafana"));
  if (state.session.auth_required && !state.session.authenticated) return renderLogin(app);
  if (state.session.auth_required) {  // who is signed in, and what the role allows (docs/access.md)
    const s = state.session;
    const can = { viewer: "reads runs", operator: "reads runs, profiles, snapshots, silences", admin: "everything" }[s.role] || "";
    links.append(h("span", { id: "who", class: "muted", "data-role": s.role, title: can },
      `${s.who} · ${s.role}` + (s.projects ? ` of ${s.projects.join(", ")}` : "")));
  }
  const m = location.hash.match(/^#\/run\/(\d+)(?:\?(.*))?$/);
  $("#crumbs").replaceChildren(h("a", { href: "#/" }, "runs"));  // (a page that cannot load keeps no other run's name)
  try {
    if (m) {
      await renderRun(app, +m[1], new URLSearchParams(m[2] || ""));
    }
    else await renderRuns(app);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return;
    // no answer or a server error may pass (a restart, a busy store): the page tries again rather than stay broken
    const retry = e instanceof ApiError && (e.status === 0 || e.status >= 500);
    app.replaceChildren(h("p", { class: "error", id: "page-error" }, String(e.message || e) + (retry ? " (retrying every 5 s)" : "")));
    if (retry) state.timers.push(setTimeout(render, 5000));  // (clearTimers clears timeouts too: one id pool)
  }
}
window.addEventListener("hashchange", render);
state.render = render;  // (api.js shows the login through it on a 401)

function renderLogin(app) {
  const input = h("input", { type: "password", id: "token", placeholder: "token", autocomplete: "current-password" });
  const err = h("p", { class: "error" });
  const form = h("form", { class: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    const r = await fetch("/api/v1/login", { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: input.value }) });
    if (r.ok) { state.session = null; render(); } else err.textContent = (await r.json()).detail;
  } }, h("h2", {}, "Sign in"), h("p", { class: "muted" }, "Use the server's token: the one given to `rl-insight server start --token` (or RL_INSIGHT_TOKEN), or the generated one it printed; `rl-insight server credentials` shows it. Or a named token an admin made for you (`rl-insight server tokens create`)."),
    input, h("button", { type: "submit" }, "Sign in"), err);
  app.replaceChildren(form);
}


// For the console and the browser tests: the page's state and its pure helpers, by the names they had as globals.
Object.assign(window, { state, fmtTick, fmtUnit, yRange, timeTicks, colorOf, showStep, groupAlerts });

render();
