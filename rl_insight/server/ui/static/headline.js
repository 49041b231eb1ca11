/* rl-insight UI, headline.js: the run page's first screen of trainer charts: reward, step time, throughput, entropy
   (the panel catalogue's headline list; of each, the first name the run logged), small, one row, on the page's range,
   crosshair and selected step like every chart. A title opens that metric's full chart below.
   A native ES module: no build step, loaded under the CSP's script-src 'self'. */
import { api } from "./api.js";
import { ChartGrid, headlineList } from "./charts.js";
import { h } from "./dom.js";

export class HeadlineCharts extends ChartGrid {
  constructor(el, runId, compareIds) {
    super(el, runId, compareIds);
    this.height = 110;
    this.picked = "";  // the names shown, joined: the boxes are rebuilt only when a newly logged one joins them
    this.checks = 0;
  }
  async load() {
    const { metrics } = await api(`/api/v1/runs/${this.runId}/metrics`);
    const logged = this.logged = new Map(metrics.map(m => [m.name, m.logged || m.name]));
    const wanted = await headlineList();
    this.wanted = wanted.length;
    const picks = wanted.map(({ title, metrics: names }) => [title, names.find(n => logged.has(n))]).filter(([, n]) => n);
    const key = picks.map(([, n]) => n).join(",");
    if (key !== this.picked || !this.el.childElementCount) {
      this.picked = key;
      this.destroyPlots();
      const fake = { open: true, hidden: false };  // (ChartGrid.refresh draws the charts of open groups)
      this.el.replaceChildren(...picks.map(([title, n]) => {
        const box = h("div", { class: "chart headline", "data-headline": n });
        box.append(h("div", { class: "title" }, h("a", { href: "#", title: `the full chart of ${n} (trainer metrics)`,
          onclick: (e) => { e.preventDefault(); this.openFull(n); } }, title), h("span", { class: "muted" }, ` ${logged.get(n)}`)));
        this.byName.set(n, { box, plot: null, name: n, details: fake, log: false });
        return box;
      }));
      if (!picks.length) this.el.append(h("p", { class: "muted", id: "headline-none" },
        "The reward, step time, throughput and entropy charts appear here once the job logs them (verl: critic/score/mean, "
        + "timing_s/step, perf/throughput, actor/entropy)."));
    }
    await super.refresh();
  }
  // a live run may log its headline metrics late (the first step ends minutes in): look again now and then
  async refresh() {
    if (this.byName.size < this.wanted && this.checks++ % 5 === 0) return this.load();
    return super.refresh();
  }
  openFull(name) {
    const box = document.querySelector(`.chart[data-metric="${CSS.escape(name)}"]`);
    const det = box?.closest("details");
    if (det) det.open = true;
    (box || document.getElementById("metrics-h"))?.scrollIntoView({ block: "center" });
  }
}
