// DAG view: the server's `project_dag` layout drawn as SVG, with pan (drag, arrow keys) and zoom
// (wheel, +/-, 0 to fit). Clicking a node (or Enter on a focused node) shows its content.
// Only nodes inside the viewport (plus a margin) are in the DOM, so a 10k-node layout stays
// responsive; culling is O(nodes) per pan/zoom frame, done in one animation frame.

import { api, cidPath, frameScheduler, h, payloadText } from "./util.js";

const SVG = "http://www.w3.org/2000/svg";
const KIND_COLORS = {
  text: ["#1e3a5f", "#3b82f6"],
  reasoning: ["#2d1f5e", "#8b5cf6"],
  tool_call: ["#4a2a0a", "#f97316"],
  tool_result: ["#3d2a05", "#f59e0b"],
  user: ["#0a3d1f", "#22c55e"],
  error: ["#3d0a0a", "#ef4444"],
  relay: ["#3d2b08", "#f59e0b"],
};
const STRUCTURAL = ["#1f2937", "#4b5563"];

function svg(tag, attrs = {}) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export class DagView {
  /** @param {HTMLElement} root  @param {string} cid  @param {(id: string) => object|null} lookup */
  constructor(root, cid, lookup) {
    this.root = root;
    this.cid = cid;
    this.lookup = lookup;
    this.layout = null;
    this.view = { x: 0, y: 0, k: 1 };
    this.selected = null;
    this.render = frameScheduler(() => this._draw());
    this._buildShell();
  }

  _buildShell() {
    this.svg = svg("svg", { class: "dag__svg", role: "application", "aria-label": "Conversation graph. Drag or use arrow keys to pan, + and - to zoom, 0 to fit.", tabindex: "0" });
    this.scene = svg("g");
    this.edgeLayer = svg("g", { class: "dag__edges" });
    this.groupLayer = svg("g", { class: "dag__groups" });
    this.nodeLayer = svg("g", { class: "dag__nodes" });
    this.scene.append(this.groupLayer, this.edgeLayer, this.nodeLayer);
    this.svg.append(this.scene);
    this.info = h("div", { class: "dag__info" }, "Loading layout…");
    this.detail = h("aside", { class: "dag__detail", "aria-label": "Selected node", "aria-live": "polite" }, h("p", { class: "muted" }, "Click a node to see its content."));
    const zoom = (f) => () => this.zoomBy(f);
    this.toolbar = h(
      "div",
      { class: "dag__toolbar", role: "toolbar", "aria-label": "Graph controls" },
      h("button", { type: "button", class: "btn", onclick: zoom(1.25), "aria-label": "Zoom in" }, "+"),
      h("button", { type: "button", class: "btn", onclick: zoom(0.8), "aria-label": "Zoom out" }, "−"),
      h("button", { type: "button", class: "btn", onclick: () => this.fit() }, "Fit"),
      h("button", { type: "button", class: "btn", onclick: () => this.load() }, "Refresh"),
      this.info,
    );
    this.canvas = h("div", { class: "dag__canvas" }, this.svg);
    this.root.replaceChildren(h("div", { class: "dag" }, this.toolbar, h("div", { class: "dag__main" }, this.canvas, this.detail)));
    this._bindPanZoom();
  }

  async load() {
    const started = performance.now();
    try {
      this.layout = await api(`${cidPath(this.cid)}/dag?model=flat`); // node ids match the client model
      this.loadMs = performance.now() - started;
    } catch (error) {
      this.info.textContent = `Could not load the layout: ${error.message}`;
      return;
    }
    const nodes = this.layout.nodes ?? [];
    this.byId = new Map(nodes.map((n) => [n.id, n]));
    this.info.textContent = `${nodes.length.toLocaleString()} nodes · ${(this.layout.edges ?? []).length.toLocaleString()} edges`;
    if (!this.fitted) {
      this.fit();
      this.fitted = true;
    } else this.render();
  }

  _size() {
    const rect = this.canvas.getBoundingClientRect();
    return { w: Math.max(rect.width, 100), h: Math.max(rect.height, 100) };
  }

  fit() {
    if (!this.layout) return;
    const { w, h: hh } = this._size();
    const lw = this.layout.width || 1;
    const lh = this.layout.height || 1;
    // Fit the width, but never zoom out so far that labels become unreadable; tall graphs scroll.
    const k = Math.max(0.7, Math.min(1.2, w / lw, lh < hh ? hh / lh : Infinity));
    this.view = { k, x: Math.max(10, (w - lw * k) / 2), y: 10 };
    this.render();
  }

  zoomBy(factor, cx, cy) {
    const { w, h: hh } = this._size();
    const px = cx ?? w / 2;
    const py = cy ?? hh / 2;
    const k = Math.min(4, Math.max(0.05, this.view.k * factor));
    const f = k / this.view.k;
    this.view = { k, x: px - (px - this.view.x) * f, y: py - (py - this.view.y) * f };
    this.render();
  }

  _bindPanZoom() {
    let drag = null;
    this.svg.addEventListener("pointerdown", (e) => {
      if (e.target.closest(".dag__node")) return;
      drag = { x: e.clientX, y: e.clientY, vx: this.view.x, vy: this.view.y };
      this.svg.setPointerCapture(e.pointerId);
    });
    this.svg.addEventListener("pointermove", (e) => {
      if (!drag) return;
      this.view = { ...this.view, x: drag.vx + e.clientX - drag.x, y: drag.vy + e.clientY - drag.y };
      this.render();
    });
    this.svg.addEventListener("pointerup", () => (drag = null));
    this.svg.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const rect = this.svg.getBoundingClientRect();
        this.zoomBy(Math.exp(-e.deltaY * 0.0015), e.clientX - rect.left, e.clientY - rect.top);
      },
      { passive: false },
    );
    this.svg.addEventListener("keydown", (e) => {
      const step = 60;
      const moves = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step] };
      if (e.target.closest && e.target.closest(".dag__node") && e.key === "Enter") return;
      if (moves[e.key]) {
        e.preventDefault();
        this.view = { ...this.view, x: this.view.x + moves[e.key][0], y: this.view.y + moves[e.key][1] };
        this.render();
      } else if (e.key === "+" || e.key === "=") this.zoomBy(1.25);
      else if (e.key === "-") this.zoomBy(0.8);
      else if (e.key === "0") this.fit();
    });
  }

  _draw() {
    if (!this.layout) return;
    const { x, y, k } = this.view;
    this.scene.setAttribute("transform", `translate(${x},${y}) scale(${k})`);
    const { w, h: hh } = this._size();
    const margin = 200;
    const x0 = (-x - margin) / k;
    const y0 = (-y - margin) / k;
    const x1 = (w - x + margin) / k;
    const y1 = (hh - y + margin) / k;
    const visible = (n) => n.x + n.width >= x0 && n.x <= x1 && n.y + n.height >= y0 && n.y <= y1;
    const groups = [];
    for (const g of this.layout.groups ?? []) {
      if (!visible(g)) continue;
      groups.push(svg("rect", { class: "dag__group", x: g.x, y: g.y, width: g.width, height: g.height, rx: 8 }));
    }
    this.groupLayer.replaceChildren(...groups);
    const edges = [];
    for (const e of this.layout.edges ?? []) {
      const s = this.byId.get(e.source);
      const t = this.byId.get(e.target);
      if (!s || !t || (!visible(s) && !visible(t))) continue;
      const sx = s.x + s.width / 2;
      const sy = s.y + s.height;
      const tx = t.x + t.width / 2;
      const ty = t.y;
      const my = (sy + ty) / 2;
      edges.push(svg("path", { class: `dag__edge dag__edge--${e.type ?? "sequence"}`, d: `M${sx},${sy} C${sx},${my} ${tx},${my} ${tx},${ty}` }));
    }
    this.edgeLayer.replaceChildren(...edges);
    const nodes = [];
    for (const n of this.layout.nodes ?? []) {
      if (!visible(n)) continue;
      const [fill, stroke] = KIND_COLORS[n.kind] ?? STRUCTURAL;
      const g = svg("g", { class: "dag__node", tabindex: "0", role: "button", "data-id": n.id, "aria-label": `${n.kind}: ${n.label}`, transform: `translate(${n.x},${n.y})` });
      if (this.selected === n.id) g.classList.add("is-selected");
      g.append(svg("rect", { width: n.width, height: n.height, rx: 6, fill, stroke }));
      const text = svg("text", { x: 8, y: n.height / 2 + 4 });
      text.textContent = n.label;
      g.append(text);
      const select = () => this.select(n.id);
      g.addEventListener("click", select);
      g.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          select();
        }
      });
      nodes.push(g);
    }
    this.nodeLayer.replaceChildren(...nodes);
  }

  select(id) {
    this.selected = id;
    const layoutNode = this.byId.get(id);
    const node = this.lookup(id);
    const rows = [h("h3", {}, layoutNode ? layoutNode.label : id), h("dl", {}, h("dt", {}, "id"), h("dd", {}, id), h("dt", {}, "kind"), h("dd", {}, layoutNode ? layoutNode.kind : "?"), h("dt", {}, "run"), h("dd", {}, layoutNode ? layoutNode.runId ?? "" : ""))];
    if (node) rows.push(h("pre", { class: "payload" }, payloadText(node)));
    else rows.push(h("p", { class: "muted" }, "No content recorded for this node."));
    this.detail.replaceChildren(...rows);
    this.render();
  }
}

/** What the graph view shows for a clicked node: its recorded event (and merged text). */
export function nodeContent(model, id) {
  const node = model.nodes.get(id);
  if (!node) return null;
  const out = { ...node.event };
  if (node.kind === "text" || node.kind === "reasoning") out.content = node.text;
  delete out.seq;
  return out;
}
