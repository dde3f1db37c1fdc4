"""Small inline SVG charts for health's HTML report, drawn here so the report needs nothing from
the network: columns (a histogram), labelled bars, and predicted/actual pairs.

Each chart is a ``<figure>`` holding one ``<svg class="chart">`` with a viewBox, so CSS scales it
to the width it gets (a phone's included). Every text is escaped; values are numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH = 360
_FONT = 11
PALETTE = {
    "blue": "#2f6db5",
    "orange": "#d9822b",
    "red": "#c23b3b",
    "green": "#2e8b57",
    "grey": "#9aa3ad",
}


def _t(text: object) -> str:
    return escape(str(text), quote=True)


def _figure(title: str, height: int, body: list[str], label: str) -> str:
    return (
        f'<figure class="chart-box"><figcaption>{_t(title)}</figcaption>'
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{_t(label)}">'
        + "".join(body)
        + "</svg></figure>"
    )


def _scale(values: Sequence[float]) -> float:
    top = max((v for v in values if v > 0), default=0.0)
    return top if top > 0 else 1.0


def columns(
    title: str, labels: Sequence[str], values: Sequence[float], texts: Sequence[str], color: str = "blue"
) -> str:
    """Vertical bars, one per label (a histogram's buckets), each with its value above it."""
    height, top, bottom, left = 190, 18, 36, 6
    plot = height - top - bottom
    n = max(1, len(values))
    slot = (WIDTH - 2 * left) / n
    scale = _scale(values)
    body = [
        f'<line x1="{left}" y1="{top + plot}" x2="{WIDTH - left}" y2="{top + plot}" '
        'stroke="#555" stroke-width="1"/>'
    ]
    for i, (label, value, text) in enumerate(zip(labels, values, texts, strict=True)):
        h = plot * value / scale
        x = left + i * slot + slot * 0.12
        w = slot * 0.76
        body.append(
            f'<rect x="{x:.1f}" y="{top + plot - h:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'fill="{PALETTE[color]}"><title>{_t(label)}: {_t(text)}</title></rect>'
        )
        cx = x + w / 2
        body.append(
            f'<text x="{cx:.1f}" y="{top + plot - h - 4:.1f}" font-size="{_FONT}" '
            f'text-anchor="middle" fill="#222">{_t(text)}</text>'
        )
        body.append(
            f'<text x="{cx:.1f}" y="{top + plot + 14:.1f}" font-size="{_FONT - 1}" '
            f'text-anchor="middle" fill="#444">{_t(label)}</text>'
        )
    return _figure(
        title, height, body, f"{title}: " + ", ".join(f"{a} {b}" for a, b in zip(labels, texts, strict=True))
    )


def bars(title: str, rows: Sequence[tuple[str, float, str]], color: str = "orange") -> str:
    """Horizontal bars: a label, a bar to scale, the value's text."""
    line, top = 24, 6
    height = top * 2 + line * max(1, len(rows))
    label_w, text_w = 150, 70
    span = WIDTH - label_w - text_w
    scale = _scale([v for _, v, _ in rows])
    body: list[str] = []
    for i, (label, value, text) in enumerate(rows):
        y = top + i * line
        w = span * value / scale
        body.append(
            f'<text x="{label_w - 6}" y="{y + 15}" font-size="{_FONT}" text-anchor="end" '
            f'fill="#333">{_t(label)}</text>'
        )
        body.append(f'<rect x="{label_w}" y="{y + 4}" width="{span:.1f}" height="14" fill="#eef1f4"/>')
        body.append(
            f'<rect x="{label_w}" y="{y + 4}" width="{w:.1f}" height="14" fill="{PALETTE[color]}">'
            f"<title>{_t(label)}: {_t(text)}</title></rect>"
        )
        body.append(
            f'<text x="{label_w + span + 6}" y="{y + 15}" font-size="{_FONT}" fill="#222">{_t(text)}</text>'
        )
    return _figure(title, height, body, f"{title}: " + ", ".join(f"{r[0]} {r[2]}" for r in rows))


def pairs(
    title: str,
    rows: Sequence[tuple[str, float, float, str, str]],
    legend: tuple[str, str] = ("predicted", "actual"),
) -> str:
    """Two bars per row, to one scale, under the row's label: (label, first, second, first's
    text, second's text)."""
    line, legend_h = 50, 22
    height = legend_h + line * max(1, len(rows))
    text_w = 70
    span = WIDTH - text_w
    scale = _scale([v for r in rows for v in (r[1], r[2])])
    body = [
        f'<rect x="0" y="4" width="10" height="10" fill="{PALETTE["grey"]}"/>',
        f'<text x="14" y="13" font-size="{_FONT}" fill="#333">{_t(legend[0])}</text>',
        f'<rect x="90" y="4" width="10" height="10" fill="{PALETTE["blue"]}"/>',
        f'<text x="104" y="13" font-size="{_FONT}" fill="#333">{_t(legend[1])}</text>',
    ]
    for i, (label, first, second, first_text, second_text) in enumerate(rows):
        y = legend_h + i * line
        body.append(f'<text x="0" y="{y + 12}" font-size="{_FONT}" fill="#333">{_t(label)}</text>')
        for j, (value, text, color) in enumerate(
            ((first, first_text, "grey"), (second, second_text, "blue"))
        ):
            w = span * value / scale
            yy = y + 17 + j * 15
            body.append(
                f'<rect x="0" y="{yy}" width="{w:.1f}" height="12" fill="{PALETTE[color]}">'
                f"<title>{_t(label)} {_t(legend[j])}: {_t(text)}</title></rect>"
            )
            body.append(
                f'<text x="{w + 4:.1f}" y="{yy + 10}" font-size="{_FONT - 1}" fill="#222">{_t(text)}</text>'
            )
    return _figure(title, height, body, title)
