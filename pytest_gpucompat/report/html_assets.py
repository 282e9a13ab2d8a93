"""The HTML page's static parts: its stylesheet and scripts, inlined by `html.render_html` (no file is loaded).

`JS_ERRORS` runs first, in the head: it records script errors and Content-Security-Policy violations into
`#gc-errors`. `JS` reads the cells from the `#gc-data` JSON block, opens a cell's details on click (with
`textContent`, never `innerHTML`), applies the filters, and runs the `#selftest` the browser test reads.

The page is read on wide screens and on phones: the matrix scrolls inside its own box (row heads and the runner
heads sticky), never the page; with many runners (`COMPACT_FROM`) its columns are compact, and below 700 px every
matrix is. Nothing is told by colour alone: a cell says its state in words, a figure over its limit has `OVER_MARK`.

PYTEST_DONT_REWRITE
"""

#: Runners from which the matrix is compact (narrower row heads and runner columns, names wrapped, smaller figures):
#: 7 runners fit 1400 px; more scroll sideways inside the matrix's box, never the page.
COMPACT_FROM = 5
#: Put before a figure over its limit: red alone says nothing to a colour-blind reader nor on a grey printout.
OVER_MARK = '<b class="over" aria-hidden="true">▲</b> '

# The compact matrix's rules, `P ` standing for the selector that makes it compact (a class, or a narrow screen).
_COMPACT = """
P th.rowhead{width:240px;min-width:180px}P th.rowhead .param,P th.rowhead .axis{white-space:normal;
overflow-wrap:anywhere}P th.rowhead .param b{display:inline-block}
P .runner{min-width:96px;max-width:150px;padding:6px}P .runner .rname{font-size:12.5px}P .runner .gpu{font-size:11.5px}
P .runner .sw,P .runner .pk,P .runner .rc,P .runner .wi{font-size:10.5px}
P td.cell{min-width:96px;padding:4px 6px;font-size:12px;white-space:normal}P .mark{margin-left:3px}
P .fig{font-size:10.5px;padding:0 3px;white-space:nowrap}
P td.cell .rule-id,P td.cell .ranon{font-size:10px;overflow-wrap:anywhere}
"""

CSS = """
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#ffffff;--soft:#f8fafc;
--pass:#16a34a;--pass-bg:#dcfce7;--fail:#dc2626;--fail-bg:#fee2e2;--err:#7f1d1d;--xf:#d97706;--xf-bg:#fef3c7;
--xp:#9333ea;--xp-bg:#f3e8ff;--skip:#64748b;--skip-bg:#f1f5f9;}
*{box-sizing:border-box}
body{margin:0;padding:20px 28px 60px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",
"Liberation Sans",Arial,sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px}h4{margin:14px 0 6px;font-size:13px}
code,pre,.param,.axis{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
code{font-size:12.5px}pre{white-space:pre-wrap;word-break:break-word}
a{color:#2563eb;text-decoration:none}a:hover{text-decoration:underline}
.muted{color:var(--muted);font-weight:normal}
.banner{background:#fef2f2;border:1px solid #fecaca;color:#991b1b;padding:8px 12px;border-radius:6px}
.summary{margin:16px 0 10px}.facts{margin:0 0 8px}
.bar{display:flex;height:14px;border-radius:7px;overflow:hidden;background:var(--soft);border:1px solid var(--line)}
.bar .seg{display:block;height:100%}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;list-style:none;padding:0;margin:8px 0 0}
.legend li{display:flex;align-items:center;gap:6px}.legend li.zero{opacity:.45}
.swatch{display:inline-block;width:12px;height:12px;border-radius:3px;flex:none}
.swatch.o-passed,.seg.o-passed{background:var(--pass)}.swatch.o-failed,.seg.o-failed{background:var(--fail)}
.swatch.o-error,.seg.o-error{background:var(--err)}.swatch.o-xfailed,.seg.o-xfailed{background:var(--xf)}
.swatch.o-xpassed,.seg.o-xpassed{background:var(--xp)}.swatch.o-skipped,.seg.o-skipped{background:#94a3b8}
.swatch.o-not-covered,.seg.o-not-covered{background:repeating-linear-gradient(45deg,#cbd5e1 0 3px,#f1f5f9 3px 6px)}
.s-passed{background:var(--pass)}.s-failed{background:var(--fail)}.s-error{background:var(--err)}
.s-xfailed{background:var(--xf)}.s-xpassed{background:var(--xp)}
.s-known-bad{background:repeating-linear-gradient(135deg,#ea580c 0 3px,#fdba74 3px 6px)}
.s-unavailable{background:#94a3b8}.s-too-big{background:#0284c7}.s-no-gpu{background:#475569}
.s-needs-gpus{background:#0369a1}.s-too-little-memory{background:#0891b2}
.s-not-covered{background:repeating-linear-gradient(45deg,#cbd5e1 0 3px,#f1f5f9 3px 6px)}
.s-claim{background:#e5e7eb;border:1px dashed #6b7280}
.whatif{background:#f5f3ff;border:1px solid #ddd6fe;color:#4c1d95;padding:8px 12px;border-radius:6px;margin:12px 0}
.whatif ul{margin:4px 0 0;padding-left:20px}.runner .wi{font-size:11.5px;color:#6d28d9;font-weight:600}
.chart-box{margin:14px 0;border:1px solid var(--line);border-radius:8px;padding:10px 12px;overflow-x:auto}
.chart-box figcaption{margin-bottom:8px}.panels{display:flex;flex-wrap:wrap;gap:10px 18px;align-items:flex-start}
svg.chart{max-width:100%;height:auto;display:block}.chart-legend{margin-top:6px}
.filters{display:flex;flex-wrap:wrap;align-items:center;gap:10px 18px;padding:10px 12px;background:var(--soft);
border:1px solid var(--line);border-radius:8px;margin:12px 0}
#f-text{flex:1 1 260px;min-width:200px;padding:6px 10px;border:1px solid #cbd5e1;border-radius:6px;font:inherit}
#f-engine{padding:5px 8px;border:1px solid #cbd5e1;border-radius:6px;font:inherit;background:#fff}
.outcomes{display:flex;flex-wrap:wrap;gap:4px 12px}.chk{display:flex;align-items:center;gap:5px;cursor:pointer}
.chk .n{color:var(--muted);font-size:12px}
.matrix-wrap{max-height:76vh;overflow:auto;border:1px solid var(--line);border-radius:8px;width:fit-content;
max-width:100%}.matrix-wrap:focus-visible{outline:2px solid #93c5fd;outline-offset:1px}
table.matrix{border-collapse:separate;border-spacing:0}
.matrix thead th{position:sticky;top:0;z-index:2;background:#fff;border-bottom:2px solid var(--line);
text-align:left;vertical-align:bottom;padding:8px 10px;font-weight:normal}
.matrix th.corner{left:0;z-index:3;color:var(--muted);font-size:12px}
.runner{min-width:140px;max-width:205px;overflow-wrap:anywhere}
.runner .rname{font-weight:600;font-size:14px;color:var(--fg)}
.runner .gpu{font-weight:600;color:#334155;font-size:12.5px}.runner .sw,.runner .pk{font-size:11.5px;color:var(--muted)}
.runner .rc{font-size:11.5px;margin-top:2px}.rc .ok{color:var(--pass)}.rc .bad{color:var(--fail);font-weight:600}
tr.group th{background:var(--soft);text-align:left;padding:7px 10px;border-top:1px solid var(--line);
border-bottom:1px solid var(--line);position:sticky;left:0}
tr.group .ghead{position:sticky;left:10px;display:inline-block;max-width:calc(100vw - 90px)}
tr.group .func{font-weight:600;overflow-wrap:anywhere}tr.group .path{color:var(--muted);font-size:12px;margin-left:6px}
tr.group .shared{margin-left:14px;font-weight:normal}tr.group .shared .param{margin-right:8px}
th.rowhead{position:sticky;left:0;z-index:1;background:#fff;text-align:left;font-weight:normal;padding:5px 10px;
border-bottom:1px solid var(--line);width:380px;min-width:170px;line-height:1.6}
.engine{display:inline-block;background:#1e293b;color:#fff;border-radius:4px;padding:1px 6px;font-size:12px;
margin-right:6px}
.param,.axis{display:inline-block;font-size:12px;margin-right:6px;color:#334155;white-space:nowrap}
.abbr{cursor:help;text-decoration:underline dotted #94a3b8}
.axis{color:#0e7490}
td.cell{border-bottom:1px solid var(--line);border-left:1px solid #fff;padding:5px 10px;cursor:pointer;
white-space:nowrap;font-size:13px;font-weight:600;transition:filter .1s}
td.cell:hover{filter:brightness(.95)}td.cell:focus{outline:2px solid #2563eb;outline-offset:-2px}
td.cell.selected{outline:3px solid #1d4ed8;outline-offset:-3px}
td.cell .dur{display:block;font-size:11px;font-weight:normal;opacity:.75}
td.cell .rule-id{display:block;font-size:10.5px;font-weight:normal;font-family:ui-monospace,Menlo,Consolas,monospace}
td.cell .ranon{display:block;font-size:10.5px;font-weight:600;color:#6d28d9}
td.cell .why{display:block;max-width:13em;white-space:normal;font-size:10.5px;font-weight:normal;color:var(--muted);
overflow-wrap:anywhere}
.fig{display:block;width:fit-content;margin-top:2px;padding:0 5px;border-radius:3px;font-size:11.5px;
font-variant-numeric:tabular-nums;background:#fff;border-left:3px solid}
.figlegend .fig{display:inline-block;margin:0 4px}
.fig.m-good{color:#166534;border-color:#16a34a}.fig.m-near{color:#92400e;background:#fef3c7;border-color:#d97706}
.fig.m-over{color:#fff;background:#dc2626;border-color:#7f1d1d;font-weight:700;outline:1px solid #7f1d1d}
.fig.m-plain{color:#334155;border-color:#94a3b8}
td.cell.dim{opacity:.25}
.o-passed{background:var(--pass-bg);color:#166534}.o-failed{background:var(--fail-bg);color:#991b1b}
.o-error{background:#991b1b;color:#fff}.o-xfailed{background:var(--xf-bg);color:#92400e}
.o-xpassed{background:var(--xp-bg);color:#6b21a8}.o-skipped{background:var(--skip-bg);color:#475569}
td[data-state=known-bad],.pill[data-state=known-bad]{
background:repeating-linear-gradient(135deg,#ffedd5 0 6px,#fed7aa 6px 12px);color:#9a3412}
td[data-state=too-big],.pill[data-state=too-big]{background:#e0f2fe;color:#075985}
td[data-state=no-gpu],.pill[data-state=no-gpu]{background:#e2e8f0;color:#1e293b}
td[data-state=needs-gpus],.pill[data-state=needs-gpus]{background:#e0f2fe;color:#075985}
td[data-state=too-little-memory],.pill[data-state=too-little-memory]{background:#cffafe;color:#155e75}
td[data-state=unavailable],.pill[data-state=unavailable]{background:#f1f5f9;color:#475569}
td[data-state=not-covered],.pill[data-state=not-covered]{
background:repeating-linear-gradient(45deg,#f8fafc 0 6px,#e2e8f0 6px 12px);
color:var(--muted);font-weight:normal;font-style:italic}
td.o-not-covered,.pill.o-not-covered{background:repeating-linear-gradient(45deg,#f8fafc 0 6px,#e2e8f0 6px 12px);
color:var(--muted);font-weight:normal;font-style:italic}
td.o-missing{color:#cbd5e1;cursor:default;text-align:center;border-bottom:1px solid var(--line)}
.mark{display:inline-block;min-width:17px;margin-left:6px;padding:0 4px;border-radius:9px;font-size:11px;
text-align:center;color:#fff;background:#64748b;vertical-align:1px}
.sev-broken{background:#dc2626;color:#fff}.sev-degraded{background:#d97706;color:#fff}
.sev-advice{background:#2563eb;color:#fff}.sev-claim{background:#e5e7eb;color:#374151}
#unconfirmed summary h2{display:inline}
#failures{margin:14px 0}ol.failures{list-style:none;padding:0;margin:0}
li.failure{border:1px solid #fecaca;border-left:4px solid var(--fail);border-radius:6px;padding:8px 12px;
margin:0 0 10px;background:#fff}
li.failure[data-outcome=xpassed]{border-color:#e9d5ff;border-left-color:var(--xp)}
li.failure p{margin:3px 0}.fail-head .func{font-weight:600}.fail-head .path{color:var(--muted);font-size:12px}
.fail-head .pill{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600}
.workaround{color:#166534}
pre.log{max-height:22em;overflow:auto;background:var(--soft);color:#0f172a;border:1px solid var(--line);
border-radius:6px;padding:6px 8px;font-size:12px;margin:4px 0}
.sev{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px}
.empty{color:var(--muted);padding:12px}
table.grid{border-collapse:collapse;font-size:13px}table.grid th,table.grid td{border:1px solid var(--line);
padding:4px 8px;text-align:left;vertical-align:top}table.grid thead th{background:var(--soft)}
table.kv{border-collapse:collapse;font-size:13px}table.kv th{text-align:left;color:var(--muted);
font-weight:normal;padding:2px 14px 2px 0;vertical-align:top}table.kv td{padding:2px 0;word-break:break-word}
.scroll{overflow-x:auto}
details.fp{border:1px solid var(--line);border-radius:8px;margin:8px 0;background:#fff}
details.fp>summary{padding:8px 12px;cursor:pointer}details.fp[open]>summary{border-bottom:1px solid var(--line)}
.fp-body{padding:6px 14px 12px}.reasons{background:#fffbeb;border:1px solid #fde68a;border-radius:6px;
padding:6px 10px;margin:8px 0;color:#78350f}.reasons ul{margin:4px 0 0;padding-left:20px}
#detail{position:fixed;top:0;right:0;bottom:0;width:min(520px,100vw);background:#fff;z-index:10;
border-left:1px solid var(--line);box-shadow:-12px 0 32px rgba(15,23,42,.16);overflow:auto;padding:0 18px 24px}
.detail-head{position:sticky;top:0;background:#fff;display:flex;align-items:center;justify-content:space-between;
padding:14px 0 8px;border-bottom:1px solid var(--line)}
.detail-head h2{margin:0;font-size:16px;display:flex;align-items:center;gap:8px}
#detail-close{border:0;background:transparent;font-size:24px;line-height:1;cursor:pointer;color:var(--muted)}
#detail h3{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);margin:16px 0 6px}
.pill{display:inline-block;padding:1px 9px;border-radius:10px;font-size:12px;font-weight:600}
.nodeid{font-size:12.5px;word-break:break-all;background:var(--soft);padding:6px 8px;border-radius:6px;margin-top:10px}
.reason{background:#fff7ed;border:1px solid #fed7aa;border-radius:6px;padding:8px 10px;margin:0;font-size:12.5px}
.rule{display:inline-block;background:var(--soft);border:1px solid var(--line);border-radius:4px;padding:0 6px;
margin:0 6px 4px 0;font-size:12px}
.finding{border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin-bottom:8px}
.finding .fhead{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:4px}
.log{background:#0f172a;color:#e2e8f0;padding:10px;border-radius:6px;font-size:12px;max-height:50vh;overflow:auto}
code{overflow-wrap:break-word}li.failure{overflow-wrap:break-word}
details.log{background:none;color:inherit;padding:0;max-height:none;overflow:visible}
""" + _COMPACT.replace("P ", ".matrix-wrap.compact ") + """
@media (max-width:700px){
body{padding:12px 10px 40px}h1{font-size:19px}
""" + _COMPACT.replace("P ", ".matrix-wrap ") + """
.matrix-wrap th.rowhead,.matrix-wrap.compact th.rowhead{width:126px;min-width:110px;padding:4px 6px}
.matrix-wrap th.rowhead .param{font-size:11px}.matrix-wrap{max-height:80vh}
tr.group .ghead{left:6px;max-width:calc(100vw - 50px)}tr.group .shared{display:block;margin-left:0}
.param,.axis{white-space:normal;overflow-wrap:anywhere}li.failure{padding:8px}#f-text{min-width:0}
svg.chart{max-width:none;flex:none}.legend li{display:block}.legend li.zero{display:none}
.legend .swatch{vertical-align:-1px;margin-right:6px}
}
"""

JS_ERRORS = """
(function(){var errors=[];
function flush(){var el=document.getElementById('gc-errors');if(!el)return;
el.setAttribute('data-count',String(errors.length));el.textContent=errors.join('\\n');if(errors.length)el.hidden=false;}
function record(msg){errors.push(String(msg));flush();}
window.addEventListener('error',function(ev){var t=ev.target;var what=ev.message||(t&&(t.src||t.href))||'unknown';
record('error: '+what+(ev.lineno?' (line '+ev.lineno+')':''));},true);
window.addEventListener('unhandledrejection',function(ev){record('unhandled rejection: '+ev.reason);});
document.addEventListener('securitypolicyviolation',function(ev){record('blocked: '+ev.blockedURI+' ('+
ev.violatedDirective+')');});
var original=console.error;console.error=function(){record('console.error: '+Array.prototype.join.call(arguments,' '));
return original.apply(console,arguments);};
document.addEventListener('DOMContentLoaded',flush);window.gcRecordError=record;})();
"""

JS = """
(function(){'use strict';
var data=JSON.parse(document.getElementById('gc-data').textContent);
var cells=data.cells;
var detail=document.getElementById('detail');
var body=document.getElementById('detail-body');
var title=document.getElementById('detail-title');
var rows=Array.prototype.slice.call(document.querySelectorAll('tr.row'));
var groups=Array.prototype.slice.call(document.querySelectorAll('tr.group'));
var boxes=Array.prototype.slice.call(document.querySelectorAll('input[name=state]'));
var text=document.getElementById('f-text');
var engine=document.getElementById('f-engine');
var count=document.getElementById('f-count');
var selected=null;
function el(tag,cls,txt){var n=document.createElement(tag);if(cls)n.className=cls;
if(txt!==undefined&&txt!==null)n.textContent=String(txt);return n;}
function plain(v){return typeof v==='string'?v:JSON.stringify(v);}
function kvTable(obj){var t=el('table','kv');Object.keys(obj).forEach(function(k){var r=t.insertRow();
r.appendChild(el('th',null,k));r.appendChild(el('td',null,plain(obj[k])));});return t;}
function add(sectionTitle,node){body.appendChild(el('h3',null,sectionTitle));body.appendChild(node);}
function show(index,td){var c=cells[index];if(!c)return;
body.textContent='';title.textContent='';
var st=data.states[index]||c.outcome;var pill=el('span','pill o-'+c.outcome,data.words[st]||c.outcome);
pill.setAttribute('data-state',st);title.appendChild(pill);
title.appendChild(el('span',null,c.test.split('::').pop()));
var where=el('div','muted',c.runner+(data.gpus[c.runner]?' · '+data.gpus[c.runner]:''));
where.style.marginTop='8px';body.appendChild(where);
body.appendChild(el('div','nodeid',c.nodeid));
if(c.reason){add('Reason',el('pre','reason',c.reason));}
if(c.explained_by&&c.explained_by.length){var kl=el('div');c.explained_by.forEach(function(k,i){
var box=el('div','finding');var h=el('div','fhead');h.appendChild(el('span','sev sev-'+(k.severity||'broken'),
i?'also matches':'matches known issue'));h.appendChild(el('code',null,k.id));
if(k.confidence)h.appendChild(el('span','muted',k.confidence));box.appendChild(h);
if(k.summary)box.appendChild(el('div',null,k.summary));
if(k.workaround)box.appendChild(el('div',null,'Workaround: '+k.workaround));kl.appendChild(box);});
add('Known issue',kl);}
if(c.rules&&c.rules.length){var rl=el('div');c.rules.forEach(function(r){rl.appendChild(el('span','rule',r));});
add('Rules',rl);}
if(c.findings&&c.findings.length){var fl=el('div');c.findings.forEach(function(f){var box=el('div','finding');
var h=el('div','fhead');
h.appendChild(el('span','sev sev-'+(f.unconfirmed?'claim':f.severity),(f.unconfirmed?'unconfirmed ':'')+f.severity));
h.appendChild(el('code',null,f.id));
[f.confidence,f.action].forEach(function(x){if(x)h.appendChild(el('span','muted',x));});box.appendChild(h);
if(f.summary)box.appendChild(el('div',null,f.summary));
var extra={};Object.keys(f).forEach(function(k){
if(['id','severity','confidence','action','summary','unconfirmed'].indexOf(k)<0
&&f[k]!==null&&f[k]!==undefined)extra[k]=f[k];});if(Object.keys(extra).length)box.appendChild(kvTable(extra));
fl.appendChild(box);});add('Findings',fl);}
var metrics={};Object.keys(c.metrics||{}).forEach(function(k){var v=c.metrics[k];
metrics[k]=(v===null?'n/a':(Math.abs(v)>=1000||Number.isInteger(v)?v:Number(v.toPrecision(4))));});
if(Object.keys(metrics).length)add('Metrics',kvTable(metrics));
var info={};if(c.engine)info.engine=c.engine;
Object.keys(c.params||{}).forEach(function(k){info['param '+k]=c.params[k];});
Object.keys(c.axes||{}).forEach(function(k){info['axis '+k]=c.axes[k];});
if(c.duration_s!==null&&c.duration_s!==undefined)info.duration=c.duration_s.toFixed(2)+' s';
if(c.when)info.phase=c.when;if(c.worker)info.worker=c.worker;
if(Object.keys(info).length)add('Cell',kvTable(info));
var known=['nodeid','test','engine','params','axes','outcome','reason','rules','findings','metrics','duration_s',
'log_tail','worker','runner','when','explained_by'];var other={};Object.keys(c).forEach(function(k){
if(known.indexOf(k)<0&&c[k]!==null&&c[k]!==undefined)other[k]=c[k];});
if(Object.keys(other).length)add('Other',kvTable(other));
if(c.log_tail){add('Log tail',el('pre','log',c.log_tail.replace(/\\x1b\\[[0-9;?]*[ -\\/]*[@-~]/g,'')));}
detail.hidden=false;
if(selected)selected.classList.remove('selected');selected=td||null;if(selected)selected.classList.add('selected');}
function hide(){detail.hidden=true;if(selected){selected.classList.remove('selected');selected=null;}}
document.addEventListener('click',function(ev){var td=ev.target.closest?ev.target.closest('td[data-cell]'):null;
if(td){show(Number(td.getAttribute('data-cell')),td);}});
document.addEventListener('keydown',function(ev){if(ev.key==='Escape'){hide();return;}
var td=ev.target&&ev.target.closest?ev.target.closest('td[data-cell]'):null;
if(td&&(ev.key==='Enter'||ev.key===' ')){ev.preventDefault();show(Number(td.getAttribute('data-cell')),td);}});
document.getElementById('detail-close').addEventListener('click',hide);
function apply(){var words=(text?text.value:'').toLowerCase().split(/\\s+/).filter(Boolean);
var want=engine?engine.value:'';var on={};boxes.forEach(function(b){on[b.value]=b.checked;});var shown=0;
rows.forEach(function(tr){var ok=(!want||tr.getAttribute('data-engine')===want);
var hay=tr.getAttribute('data-search')||'';
for(var i=0;ok&&i<words.length;i++){if(hay.indexOf(words[i])<0)ok=false;}
if(ok){ok=(tr.getAttribute('data-states')||'').split(' ').some(function(o){return on[o];});}
tr.hidden=!ok;if(ok)shown++;
Array.prototype.forEach.call(tr.querySelectorAll('td[data-state]'),function(td){
td.classList.toggle('dim',!on[td.getAttribute('data-state')]);});});
groups.forEach(function(g){var n=g.nextElementSibling;var any=false;
while(n&&!n.classList.contains('group')){if(!n.hidden){any=true;break;}n=n.nextElementSibling;}g.hidden=!any;});
if(count)count.textContent=shown+' of '+rows.length+' rows';
var none=document.getElementById('no-rows');if(none)none.hidden=shown>0||rows.length===0;return shown;}
if(text)text.addEventListener('input',apply);if(engine)engine.addEventListener('change',apply);
boxes.forEach(function(b){b.addEventListener('change',apply);});
apply();
if(location.hash==='#selftest'){var out=document.getElementById('gc-selftest');var problems=[];
try{boxes.forEach(function(b){b.checked=false;});if(apply()!==0)problems.push('outcome filter left rows visible');
boxes.forEach(function(b){b.checked=true;});if(apply()!==rows.length)problems.push('outcome filter lost rows');
if(text){text.value='no-such-cell-zz9';if(apply()!==0)problems.push('text filter left rows visible');
text.value='';apply();}
var first=document.querySelector('td[data-cell]');
var bad=null,best=-1;Array.prototype.forEach.call(document.querySelectorAll(
'td[data-outcome=failed],td[data-outcome=error]'),function(td){var c=cells[Number(td.getAttribute('data-cell'))];
var score=(c.log_tail?2:0)+(c.reason?1:0)+(c.findings.length?1:0);if(score>best){best=score;bad=td;}});
if(!first){problems.push('no clickable cell');}
[first,bad].forEach(function(td){if(!td)return;td.click();var c=cells[Number(td.getAttribute('data-cell'))];
if(detail.hidden)problems.push('details did not open');
if(body.textContent.indexOf(c.nodeid)<0)problems.push('details lack the nodeid of '+c.nodeid);
if(c.reason&&body.textContent.indexOf(c.reason.split('\\n')[0])<0)problems.push('details lack the reason');
if(!td.classList.contains('selected'))problems.push('cell not marked selected');});
}catch(err){problems.push('exception: '+err);}
var result=problems.length?'fail: '+problems.join('; '):'ok';
out.setAttribute('data-result',result);out.textContent=result;}
})();
"""
