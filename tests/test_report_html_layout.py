"""The HTML page at any width, in a real headless Chromium, by element positions: a fleet of 7 or 12 runners at
1400 px (the page never scrolls sideways; the matrix fits or scrolls inside its own box with its row heads sticky)
and a phone's 390 px (nothing sticks out of the page: wide tables, the matrix and the charts scroll in their boxes).

Chromium's window is never narrower than 500 px, so the phone is a 390×844 iframe in a frame page: the measuring
script inside the report posts what it measured to the frame page, whose DOM `--dump-dom` gives us.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from _fleet_report import fleet_report
from test_report_html_browser import _chromium, _page_errors, _run
from test_report_html_browser import _report as _three_runner_report

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.model import Report

READABLE = 90  # px: no runner column and no row head narrower than this

_MEASURE = """<script>window.addEventListener('load',function(){
function box(n){var r=n.getBoundingClientRect();return {l:r.left,r:r.right,w:r.width};}
function all(sel,root){return Array.prototype.slice.call((root||document).querySelectorAll(sel));}
function scrolls(n){for(var p=n.parentElement;p&&p!==document.body;p=p.parentElement){
var o=getComputedStyle(p).overflowX;if(o==='auto'||o==='scroll')return p;}return null;}
var W=window.innerWidth,wrap=document.querySelector('.matrix-wrap'),heads=all('th.runner'),rows=all('th.rowhead');
var out={width:W,doc:document.documentElement.scrollWidth,wrap:box(wrap),wrapScroll:[wrap.scrollWidth,wrap.clientWidth],
heads:heads.map(box),rowheads:rows.slice(0,5).map(box),sticky:rows.slice(0,5).map(function(n){
return getComputedStyle(n).position;}),outside:[],tables:[],charts:{}};
all('body *').forEach(function(n){var b=n.getBoundingClientRect();if(b.width>0&&b.right>W+1&&!scrolls(n))
out.outside.push(n.tagName.toLowerCase()+'.'+n.className+' right '+Math.round(b.right));});
all('table').forEach(function(t){var s=scrolls(t);out.tables.push({cls:t.className,r:box(t).r,box:s?box(s).r:null});});
all('svg.chart').forEach(function(s){var b=box(s),k=s.closest('.chart-box');out.charts[s.getAttribute('data-chart')]=
{scale:b.w/Number(s.getAttribute('width')),box:k?box(k).r:null};});
var fail=document.getElementById('failures');out.failures=fail?box(fail).r:null;
wrap.scrollLeft=wrap.scrollWidth;out.scrolled={wrap:box(wrap),rowhead:box(rows[0]),last:box(heads[heads.length-1])};
wrap.scrollLeft=0;var text=JSON.stringify(out);
if(window.parent!==window){window.parent.postMessage(text,'*');}else{var pre=document.createElement('pre');
pre.id='gc-layout';pre.textContent=text;document.body.appendChild(pre);}});</script>"""

_FRAME = """<!doctype html><html><head><meta charset="utf-8"><style>html,body{margin:0}
iframe{border:0;width:390px;height:844px;display:block}</style></head><body><iframe src="report.html"></iframe>
<pre id="gc-layout"></pre><script>window.addEventListener('message',function(ev){
document.getElementById('gc-layout').textContent=String(ev.data);});</script></body></html>"""


def _layout(report: Report, tmp_path: Path, phone: bool = False) -> dict[str, Any]:
    """The page's measurements at 1400×900, or at 390×844 (`phone`) in the frame page."""
    chromium = _chromium()
    page = tmp_path / "report.html"
    page.write_text(render_html(report).replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    target = page
    if phone:
        target = tmp_path / "phone.html"
        target.write_text(_FRAME, encoding="utf-8")
    size = "--window-size=390,844" if phone else "--window-size=1400,900"
    result = _run(chromium, tmp_path / "profile", size, "--dump-dom", target.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert not _page_errors(result.stderr)
    found = re.search(r'<pre id="gc-layout">(.+?)</pre>', result.stdout, re.S)
    assert found is not None, "the measuring script did not run"
    layout: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert layout["width"] == (390 if phone else 1400)
    return layout


def _every_column_reachable(layout: dict[str, Any]) -> None:
    """Each runner column is on screen, or the matrix box scrolls to it with the row heads staying in view."""
    wrap, heads = layout["wrap"], layout["heads"]
    assert wrap["r"] <= layout["width"] + 1
    assert all(h["w"] >= READABLE for h in heads), [round(h["w"]) for h in heads]
    assert all(r["w"] >= READABLE for r in layout["rowheads"]), [round(r["w"]) for r in layout["rowheads"]]
    if all(h["r"] <= wrap["r"] + 1 for h in heads):
        return
    scroll, client = layout["wrapScroll"]
    assert scroll > client, "a column is off screen yet the matrix box does not scroll"
    assert set(layout["sticky"]) == {"sticky"}
    scrolled = layout["scrolled"]
    assert scrolled["last"]["r"] <= scrolled["wrap"]["r"] + 1  # scrolled to the end: the last runner is in the box
    assert abs(scrolled["rowhead"]["l"] - scrolled["wrap"]["l"]) <= 2  # and the row heads are still at its left


@pytest.mark.parametrize("runners", [7, 12])
def test_a_fleet_fits_1400px_or_scrolls_inside_the_matrix_box(runners: int, tmp_path: Path) -> None:
    layout = _layout(fleet_report(runners), tmp_path)
    assert layout["doc"] <= 1400, layout["outside"]
    assert layout["outside"] == []
    assert len(layout["heads"]) == runners
    _every_column_reachable(layout)
    if runners <= 7:  # compact columns: seven runners fit beside the row heads, nothing to scroll
        assert all(h["r"] <= layout["wrap"]["r"] + 1 for h in layout["heads"])
        assert layout["wrapScroll"][0] <= layout["wrapScroll"][1] + 1


@pytest.mark.parametrize("which", ["three runners", "fleet of four"])
def test_no_sideways_page_scroll_on_a_phone(which: str, tmp_path: Path) -> None:
    report = _three_runner_report() if which == "three runners" else fleet_report()
    layout = _layout(report, tmp_path, phone=True)
    assert layout["doc"] <= 390, layout["outside"]
    assert layout["outside"] == []
    if layout["failures"] is not None:
        assert layout["failures"] <= 390
    _every_column_reachable(layout)
    for table in layout["tables"]:  # a table wider than the screen scrolls inside its own box
        assert table["r"] <= 390 or (table["box"] is not None and table["box"] <= 390), table
    for name, chart in layout["charts"].items():  # at its own size (11 px text), scrolling inside its box
        assert chart["scale"] >= 0.8 and chart["box"] is not None and chart["box"] <= 390, (name, chart)
    if which == "fleet of four":
        assert "drift" in layout["charts"]
