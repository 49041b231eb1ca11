/* rl-insight UI, api.js: this server's API: `api(path)` answers JSON or throws ApiError (a 401 sends the page to its login); the page's shared state and timers.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { render } from "./main.js";

export class ApiError extends Error {}
export async function api(path, opts = {}) {
  const r = await fetch(path, { credentials: "same-origin", ...opts });
  if (r.status === 401) { state.session.authenticated = false; render(); throw new ApiError("login required"); }
  const body = r.headers.get("content-type")?.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new ApiError(body.detail || `HTTP ${r.status}`);
  return body;
}

export const state = { session: null, timers: [], charts: [], timeline: null };
window.rlInsight = state;  // for debugging and for the browser tests

export function clearTimers() { state.timers.forEach(clearInterval); state.timers = []; state.charts.forEach(c => c.destroy()); state.charts = []; }
export function every(ms, fn) { state.timers.push(setInterval(fn, ms)); }
