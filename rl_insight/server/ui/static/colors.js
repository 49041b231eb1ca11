/* rl-insight UI, colors.js: the page's colours: the series palette and the RL stages' colours (rl_insight/semantics/palette.py,
   served as /ui/palette.json, the same in the offline HTML and PNG). A leaf: the timeline and the charts both read it.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
export const PALETTE = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4f46e5", "#059669"];
// Stage colours: rl_insight/semantics/palette.py (served as /ui/palette.json), the same in the offline HTML and PNG.
let STAGE_COLORS = { stages: {}, fallback: PALETTE, mixed: "#9ca3af" };
export const paletteReady = fetch("/ui/palette.json").then(r => r.ok ? r.json() : null)
  .then(p => { if (p && p.stages && Array.isArray(p.fallback) && p.fallback.length) STAGE_COLORS = p; }).catch(() => {});
export const fnv1a = (text) => { let h = 0x811c9dc5; for (const b of new TextEncoder().encode(text)) { h ^= b; h = Math.imul(h, 0x01000193) >>> 0; } return h; };
export const colorOf = (name) => STAGE_COLORS.stages[name] || STAGE_COLORS.fallback[fnv1a(name) % STAGE_COLORS.fallback.length];
