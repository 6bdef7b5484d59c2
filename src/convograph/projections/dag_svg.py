"""SVG rendering of a DAG layout (`DAGLayout.to_svg`): groups under edges under nodes.

Runs compiled (mypyc, see `convograph._native`). It reads the layout's records by attribute only,
so it imports `convograph.projections.dag_model` for types alone (no import cycle: the model calls
`render_svg`).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from convograph.projections.dag_model import DAGLayout

__all__ = ["COLORS", "render_svg"]

COLORS: Final[dict[str, tuple[str, str]]] = {
    "text": ("#1e3a5f", "#3b82f6"),
    "reasoning": ("#2d1f5e", "#8b5cf6"),
    "tool_call": ("#4a2a0a", "#f97316"),
    "tool_result": ("#3d2a05", "#f59e0b"),
    "user": ("#0a3d1f", "#22c55e"),
    "error": ("#3d0a0a", "#ef4444"),
    "relay": ("#3d2b08", "#f59e0b"),
    "structural": ("#1f2937", "#4b5563"),
}


def render_svg(layout_: DAGLayout) -> str:
    """SVG for a layout: groups under edges under nodes; labels escaped."""
    by_id = {node.id: node for node in layout_.nodes}
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{layout_.width}" height="{layout_.height}" '
        f'viewBox="0 0 {layout_.width} {layout_.height}" font-family="ui-monospace, monospace" '
        'font-size="12">',
        f'<rect width="{layout_.width}" height="{layout_.height}" fill="#0b1020"/>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#64748b"/>'
        "</marker></defs>",
    ]
    for group in layout_.groups:
        out.append(
            f'<rect class="group" x="{group.x}" y="{group.y}" width="{group.width}" '
            f'height="{group.height}" rx="8" fill="rgba(59,130,246,0.06)" '
            f'stroke="rgba(59,130,246,0.3)"><title>{escape(group.label)}</title></rect>'
        )
    for edge in layout_.edges:
        source = by_id.get(edge.source)
        target = by_id.get(edge.target)
        if source is None or target is None:
            continue
        x1 = source.x + source.width // 2
        y1 = source.y + source.height
        x2 = target.x + target.width // 2
        y2 = target.y
        mid = (y1 + y2) // 2
        dash = ' stroke-dasharray="4 3"' if edge.type == "spawn" else ""
        out.append(
            f'<path class="edge" d="M{x1},{y1}C{x1},{mid} {x2},{mid} {x2},{y2}" fill="none" '
            f'stroke="#64748b"{dash} marker-end="url(#arrow)"/>'
        )
    for node in layout_.nodes:
        fill, stroke = COLORS.get(node.kind, COLORS["structural"])
        out.append(
            f'<g class="node" data-id="{escape(node.id)}"><rect x="{node.x}" y="{node.y}" '
            f'width="{node.width}" height="{node.height}" rx="6" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{node.x + 8}" y="{node.y + node.height // 2 + 4}" fill="#e5e7eb">'
            f"{escape(node.label)}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out)
