/* rl-insight UI, moe.js: MoE expert load (verl's rollout/moe/*; rl_insight/semantics/moe.py): a heatmap of each layer's busiest
   expert against its fair share, step by step, and — when the job logs each expert's share — layers × experts at the
   last step; the most imbalanced layer and the hottest expert named in a sentence. Hidden when the run has none.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api } from "./api.js";
import { $, h } from "./dom.js";

// 1× fair share (max_vio 0) is pale, 3× and more the darkest red
const heat = (timesFair) => {
  const t = Math.max(0, Math.min(1, (timesFair - 1) / 2));
  return `rgb(${Math.round(254 - 70 * t)}, ${Math.round(243 - 215 * t)}, ${Math.round(199 - 170 * t)})`;
};

function drawGrid(canvas, rows, cols, value, label) {
  const W = Math.max(300, canvas.parentElement.clientWidth - 40), cell = Math.max(6, Math.min(18, 320 / rows.length));
  const gutter = 60, H = rows.length * cell + 18, cw = (W - gutter) / Math.max(1, cols.length), dpr = devicePixelRatio || 1;
  canvas.width = W * dpr; canvas.height = H * dpr; canvas.style.width = `${W}px`; canvas.style.height = `${H}px`;
  const ctx = canvas.getContext("2d"); ctx.scale(dpr, dpr); ctx.clearRect(0, 0, W, H);
  ctx.font = "10px system-ui"; ctx.fillStyle = "#6b7280";
  rows.forEach((r, i) => {
    ctx.fillStyle = "#6b7280";  // (the cells below leave their colour behind)
    if (rows.length <= 24 || i % Math.ceil(rows.length / 24) === 0) ctx.fillText(`layer ${r}`, 2, i * cell + cell - 2);
    cols.forEach((c, j) => {
      const v = value(i, j);
      if (v === null || v === undefined) return;
      ctx.fillStyle = heat(v); ctx.fillRect(gutter + j * cw, i * cell, Math.max(1, cw - (cw > 4 ? 1 : 0)), cell - 1);
    });
  });
  ctx.fillStyle = "#6b7280";
  const every = Math.ceil(cols.length / Math.max(1, Math.floor((W - gutter) / 50)));
  cols.forEach((c, j) => { if (j % every === 0) ctx.fillText(label(c), gutter + j * cw, H - 4); });
  canvas.onmousemove = (e) => {
    const i = Math.floor(e.offsetY / cell), j = Math.floor((e.offsetX - gutter) / cw), tip = $("#tooltip");
    const v = i >= 0 && i < rows.length && j >= 0 && j < cols.length ? value(i, j) : null;
    if (v === null || v === undefined) { tip.hidden = true; return; }
    tip.textContent = `layer ${rows[i]} · ${label(cols[j])}: busiest expert ${v.toFixed(2)}× its fair share`;
    if (canvas.dataset.kind === "experts") tip.textContent = `layer ${rows[i]} · expert ${cols[j]}: ${v.toFixed(2)}× its fair share`;
    tip.hidden = false; tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
  };
  canvas.onmouseleave = () => { $("#tooltip").hidden = true; };
}

export async function renderMoe(el, head, runId) {
  const m = await api(`/api/v1/runs/${runId}/moe`).catch(() => null);
  const has = !!(m && m.layers.length);
  el.hidden = head.hidden = !has;
  if (!has) return;
  const steps = h("canvas", { id: "moe-steps", "data-kind": "steps" });
  const parts = [h("p", { id: "moe-sentence" }, m.sentence),
    h("div", { class: "muted" }, "each layer's busiest expert against its fair share (1×: balanced), by step"), steps];
  let experts = null;
  if (m.experts) {
    experts = h("canvas", { id: "moe-experts", "data-kind": "experts" });
    parts.push(h("div", { class: "muted" }, `each expert's share against fair, at step ${m.experts.step}`), experts);
  }
  el.replaceChildren(...parts);
  el.dataset.hotLayer = m.latest?.layer ?? "";
  el.dataset.hotExpert = m.experts?.hot ? `${m.experts.hot.layer}/${m.experts.hot.expert}` : "";
  drawGrid(steps, m.layers, m.steps, (i, j) => (m.max_vio[i][j] === null ? null : m.max_vio[i][j] + 1), (s) => `step ${s}`);
  if (experts) {
    const n = m.experts.load[0].length, layers = m.experts.load.map((_, i) => i);
    drawGrid(experts, layers, [...Array(n).keys()], (i, j) => (m.experts.load[i][j] === null ? null : m.experts.load[i][j] * n),
      (e) => `expert ${e}`);
  }
}
