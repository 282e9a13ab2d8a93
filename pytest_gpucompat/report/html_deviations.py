"""The HTML page's deviations section: the settings the cells' engines ran with that differ from the engines' own
defaults, as a small table (one row per setting of each distinct set, with who set it, the engine's default and
why), not a line of text per set.
PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from .html_runners import e
from .model import DEVIATIONS_SUMMARY, CellRecord, Report, deviation_groups
from .text import one_line


def deviations_section(report: Report) -> str:
    """The deviations as a small table: per engine and set of deviations (deviation_groups), one row per setting
    with its value, who set it, the engine's own default and why."""
    groups = deviation_groups(report.cells)
    if not groups:
        return ""
    example: dict[tuple[str, str], CellRecord] = {}
    for cell in report.cells:
        if cell.deviations and cell.ran:
            example.setdefault((cell.engine or "", cell.deviations_text()), cell)
    rows = []
    for engine, text, count in groups:
        settings = example[(engine, text)].deviations
        for i, d in enumerate(settings):
            first = (f'<td rowspan="{len(settings)}"><code>{e(engine or "engine")}</code></td>'
                     f'<td rowspan="{len(settings)}">{count}</td>') if i == 0 else ""
            default = repr(d["engine_default"]) if "engine_default" in d else "—"
            rows.append(f"<tr>{first}<td><code>{e(str(d.get('name')))}</code></td><td><code>"
                        f"{e(repr(d.get('value')))}</code></td><td>{e(str(d.get('by')))}</td><td><code>{e(default)}"
                        f"</code></td><td>{e(one_line(str(d.get('why') or ''), 300))}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("engine", "cells", "setting", "value", "set by", "engine default",
                                                 "why"))
    return (f'<section id="deviations"><h2>Settings that differ from the engines\' defaults '
            f'<span class="muted">({len(groups)})</span></h2><p class="muted">{e(DEVIATIONS_SUMMARY)}</p>'
            f'<div class="scroll"><table class="grid"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
            "</tbody></table></div></section>")
