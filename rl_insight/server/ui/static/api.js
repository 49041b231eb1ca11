/* rl-insight UI, api.js: this server's API: `api(path)` answers JSON or throws ApiError (a 401 sends the page to its login); the page's shared state and timers.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
// `status` is the answer's HTTP status, 0 when none came: a view that failed on 0 or 5xx may work when retried.
export class ApiError extends Error { constructor(message, status) { super(message); this.status = status; } }
export async function api(path, opts = {}) {
  let r;
  try {
    r = await fetch(path, { credentials: "same-origin", ...opts });
  } catch (e) { unreachable(`no answer (${e.message})`); throw new ApiError("the server is not answering", 0); }
  heard(r.status);
  // (the page's entry sets state.render: this module imports no view, so no module imports back into it)
  if (r.status === 401) { state.session.authenticated = false; state.render?.(); throw new ApiError("login required", 401); }
  const body = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new ApiError(body.detail || `HTTP ${r.status}`, r.status);
  return body;
}

export const state = { session: null, timers: [], charts: [], timeline: null };
// What the signed-in token's role allows (GET /api/v1/session; server/access/principal.py): an action a role cannot
// take has no button at all, rather than one that fails.
export const canOperate = () => ["operator", "admin"].includes(state.session?.role) || !state.session?.auth_required;
window.rlInsight = state;  // for debugging and for the browser tests

export function clearTimers({ keepCharts = false } = {}) {
  state.timers.forEach(clearInterval); state.timers = [];
  if (!keepCharts) { state.charts.forEach(c => c.destroy()); state.charts = []; }
}
// a refresh that fails (the server stopped) is shown once by the banner below, never as an error per timer
export function every(ms, fn) { state.timers.push(setInterval(() => Promise.resolve().then(fn).catch(() => {}), ms)); }

// The page never shows stale data silently: while the server does not answer, a banner says since when.
// The views' own refreshes raise it, and so does a watchdog that does not depend on them (a view may still be
// loading, or have failed before its refreshes started): while refreshing is on, a page that has heard nothing
// for 6 s asks the server's session endpoint (open, small). "Off" (state.refreshMs 0) stops the watchdog too.
let lastHeard = Date.now();
function heard(status) {
  if (status === 502 || status === 503 || status === 504) { unreachable(`HTTP ${status}`); return; }
  lastHeard = Date.now();
  reachable();
}
setInterval(() => {
  if (state.refreshMs === 0 || Date.now() - lastHeard < 6000) return;
  fetch("/api/v1/session", { credentials: "same-origin", cache: "no-store" })
    .then(r => heard(r.status), e => unreachable(`no answer (${e.message})`));
}, 3000);

function unreachable(why) {
  const el = document.getElementById("offline-banner");
  if (!el) return;
  if (!state.unreachableSince) state.unreachableSince = new Date();
  el.textContent = `The server at ${location.origin} is not answering (${why}) since `
    + `${state.unreachableSince.toLocaleTimeString([], { hour12: false })}: what this page shows is from then. Retrying…`;
  el.hidden = false;
}
function reachable() {
  if (!state.unreachableSince) return;
  state.unreachableSince = null;
  const el = document.getElementById("offline-banner");
  if (el) el.hidden = true;
}

// The run page's view state lives in the address (`#/run/N?step=…&steps=…`): set (or, with null, drop) some of its
// parameters without a new history entry and without re-rendering the page.
export function setUrlParams(values) {
  const [path, query] = location.hash.split("?");
  const params = new URLSearchParams(query || "");
  for (const [k, v] of Object.entries(values)) { if (v === null || v === undefined || v === "") params.delete(k); else params.set(k, v); }
  const q = params.toString();
  history.replaceState(null, "", q ? `${path}?${q}` : path);
}
