/* rl-insight UI, lanes.js: the one order of lanes, as rl_insight/semantics/lane_order.py sorts them (a test compares the two).
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */

export function laneKey(lane) {
  const m = /^(.+?)(?:[_-](\d+))?$/s.exec(lane || "");
  return m ? [m[1], m[2] ? Number(m[2]) : -1, lane || ""] : [lane || "", -1, lane || ""];
}
// code points, not locale: the same comparison as Python's on str
const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
export function compareLanes(a, b) {
  const ka = laneKey(a), kb = laneKey(b);
  return cmp(ka[0], kb[0]) || cmp(ka[1], kb[1]) || cmp(ka[2], kb[2]);
}
