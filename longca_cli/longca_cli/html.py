"""One self-contained HTML page (no network, no library: a little inline JavaScript) with a
sortable, filterable table of rows, the full record of a row on hover, and SVG plots that follow
the filters. Used by `longca report --html` and `longca compare --format html`."""
from __future__ import annotations

import html
import json
import re
from typing import Any

from longca_cli import analysis
from longca_cli.analysis import Results

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:left;white-space:nowrap}
th{background:#f2f2f2}
#rows th{cursor:pointer;user-select:none}
#rows th.asc::after{content:" ▲"} #rows th.desc::after{content:" ▼"}
#rows tr:hover td{background:#eef4ff}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.s-ok{} td.s-bad{color:#a33} td.s-na{color:#888}
.filters label{margin-right:1em} .filters select{margin-left:.3em}
#detail{position:fixed;right:1em;bottom:1em;max-width:40em;max-height:45vh;overflow:auto;background:#fffff0;
border:1px solid #bbb;padding:.5em;font:12px monospace;white-space:pre;display:none}
#charts{display:flex;flex-wrap:wrap;gap:8px}
#charts svg{border:1px solid #ddd;background:#fff}
.legend span{display:inline-block;margin-right:1em} .legend i{display:inline-block;width:1.5em;height:3px;
vertical-align:middle;margin-right:.3em}
code{background:#f4f4f4;padding:0 2px}
"""

SCRIPT = r"""
const data = JSON.parse(document.getElementById('data').textContent);
const rows = data.rows, cols = data.columns, filters = data.filters;
const tbody = document.querySelector('#rows tbody'), thead = document.querySelector('#rows thead tr');
const detail = document.getElementById('detail');
let sortKey = null, sortDir = 1;
const BAD = ['slower', 'broken', 'now refused', 'err', 'oom', 'wrong', 'timeout', 'unsup'];
const NA = ['n/a', 'not installed in NEW', 'runs in neither', ''];
function fmt(v, c) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') {
    if (c.small && Math.abs(v) < 10) return String(+v.toPrecision(3));
    return c.digits !== undefined ? v.toFixed(c.digits) : String(v);
  }
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}
cols.forEach(c => {
  const th = document.createElement('th'); th.textContent = c.label; th.dataset.key = c.key;
  th.onclick = () => { sortDir = sortKey === c.key ? -sortDir : 1; sortKey = c.key; render(); };
  thead.appendChild(th);
});
const fbox = document.getElementById('filters');
filters.forEach(f => {
  const values = [...new Set(rows.map(r => r[f.key]))].filter(v => v !== null && v !== undefined)
    .sort((a, b) => (typeof a === 'number' && typeof b === 'number') ? a - b : String(a).localeCompare(String(b)));
  const label = document.createElement('label'); label.textContent = f.label;
  const sel = document.createElement('select'); sel.id = 'filter-' + f.key; sel.dataset.key = f.key;
  sel.appendChild(new Option('all', ''));
  values.forEach(v => sel.appendChild(new Option(f.key === 'seqlen' ? size(v) : String(v), String(v))));
  sel.onchange = render; label.appendChild(sel); fbox.appendChild(label);
});
function size(n) { return n % 1048576 === 0 ? (n / 1048576) + 'M' : n % 1024 === 0 ? (n / 1024) + 'k' : String(n); }
function visible() {
  const chosen = [...document.querySelectorAll('#filters select')].filter(s => s.value !== '');
  return rows.filter(r => chosen.every(s => String(r[s.dataset.key]) === s.value));
}
function render() {
  let shown = visible();
  if (sortKey) {
    shown = shown.slice().sort((a, b) => {
      const x = a[sortKey], y = b[sortKey];
      if (x === y) return 0; if (x === null || x === undefined) return 1; if (y === null || y === undefined) return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * sortDir;
    });
  }
  thead.querySelectorAll('th').forEach(th =>
    th.className = th.dataset.key === sortKey ? (sortDir > 0 ? 'asc' : 'desc') : '');
  tbody.replaceChildren(...shown.map(r => {
    const tr = document.createElement('tr');
    cols.forEach(c => {
      const td = document.createElement('td'); td.textContent = c.key === 'seqlen' ? size(r[c.key]) : fmt(r[c.key], c);
      if (c.num) td.className = 'num';
      if (c.key === 'state') td.className = BAD.includes(r.state) ? 's-bad' : NA.includes(r.state) ? 's-na' : 's-ok';
      tr.appendChild(td);
    });
    const record = JSON.stringify(r.record, null, 1);
    tr.title = record;
    tr.onmouseenter = () => { detail.textContent = record; detail.style.display = 'block'; };
    tr.onmouseleave = () => { detail.style.display = 'none'; };
    return tr;
  }));
  document.getElementById('count').textContent = shown.length + ' of ' + rows.length + ' rows shown';
  if (data.chart) chart(shown);
}
const NS = 'http://www.w3.org/2000/svg';
function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name); for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e); return e;
}
function chart(shown) {
  const spec = data.chart, box = document.getElementById('charts');
  const pts = shown.filter(r => r[spec.y] !== null && r[spec.y] !== undefined && r.state === 'ok' && !r.cp);
  const panels = [...new Set(pts.map(r => r.mask + ' · ' + r.direction))];
  box.replaceChildren();
  const W = 300, H = 210, L = 44, R = 8, T = 20, B = 34;
  panels.slice(0, 60).forEach(p => {
    const mine = pts.filter(r => r.mask + ' · ' + r.direction === p);
    const xs = mine.map(r => Math.log2(r.seqlen)), x0 = Math.min(...xs) - 0.3, x1 = Math.max(...xs) + 0.3;
    const ymax = Math.max(...mine.map(r => r[spec.y]), spec.peak || 0, spec.sheet || 0) * 1.08 || 1;
    const X = v => L + (Math.log2(v) - x0) / (x1 - x0) * (W - L - R), Y = v => H - B - v / ymax * (H - T - B);
    const svg = el('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, 'class': 'chart'}, box);
    el('text', {x: W / 2, y: 13, 'text-anchor': 'middle', 'font-size': 11}, svg).textContent = p;
    el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#555'}, svg);
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#555'}, svg);
    const raw = ymax / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
    for (let v = 0; v <= ymax; v += step) {
      el('text', {x: L - 3, y: Y(v) + 3, 'text-anchor': 'end', 'font-size': 9}, svg).textContent = +v.toPrecision(6);
      el('line', {x1: L, y1: Y(v), x2: W - R, y2: Y(v), stroke: '#eee'}, svg);
    }
    [...new Set(mine.map(r => r.seqlen))].filter(s => (s & (s - 1)) === 0).forEach(s =>
      el('text', {x: X(s), y: H - B + 12, 'text-anchor': 'middle', 'font-size': 9}, svg).textContent = size(s));
    el('text', {x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle', 'font-size': 9}, svg).textContent =
      'sequence length (log2)';
    el('text', {x: 10, y: (T + H - B) / 2, 'font-size': 9, transform: `rotate(-90 10 ${(T + H - B) / 2})`,
                'text-anchor': 'middle'}, svg).textContent = spec.ylabel;
    if (spec.peak) el('line', {x1: L, y1: Y(spec.peak), x2: W - R, y2: Y(spec.peak), stroke: '#777',
                               'stroke-dasharray': '4 3'}, svg);
    if (spec.sheet) el('line', {x1: L, y1: Y(spec.sheet), x2: W - R, y2: Y(spec.sheet), stroke: '#222',
                                'stroke-dasharray': '1 2'}, svg);
    [...new Set(mine.map(r => r.column))].sort().forEach(k => {
      const line = mine.filter(r => r.column === k).sort((a, b) => a.seqlen - b.seqlen);
      const colour = data.colours[k] || '#444';
      el('polyline', {points: line.map(r => X(r.seqlen) + ',' + Y(r[spec.y])).join(' '), fill: 'none',
                      stroke: colour, 'stroke-width': 1.5}, svg);
      line.forEach(r => {
        const c = el('circle', {cx: X(r.seqlen), cy: Y(r[spec.y]), r: 3, fill: colour}, svg);
        el('title', {}, c).textContent = JSON.stringify(r.record, null, 1);
      });
    });
  });
  document.getElementById('legend').replaceChildren(...[...new Set(pts.map(r => r.column))].sort().map(k => {
    const s = document.createElement('span'); const i = document.createElement('i');
    i.style.background = data.colours[k] || '#444'; s.append(i, k); return s;
  }));
}
render();
"""


def _inline(text: str) -> str:
    text = html.escape(text)
    text = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def markdown_to_html(lines: list[str]) -> str:
    """The subset of markdown the report writes: headings, tables, paragraphs, bold, code."""
    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            head, *body = table
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</table>")
            table.clear()

    for block in lines:
        for line in block.splitlines():
            if line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if not all(set(c) <= {"-"} for c in cells):
                    table.append(cells)
                continue
            flush()
            heading = re.match(r"^(#{1,4}) (.*)", line)
            if heading:
                level = len(heading.group(1))
                out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            elif line.strip():
                out.append(f"<p>{_inline(line)}</p>")
    flush()
    return "\n".join(out)


def _json_for_script(value: Any) -> str:
    """The page's data as inert script text: every `<`, `>` and `&` as a JSON escape, so no row
    string (a reason holding `<!--<script>` or `</script>`) can end the data block or switch the
    HTML parser into a state that swallows the rest of the page. JSON.parse reads them back."""
    text = json.dumps(value, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, intro_html: str, rows: list[dict[str, Any]], columns: list[dict[str, Any]],
         filters: list[dict[str, str]], chart: dict[str, Any] | None = None,
         colours: dict[str, str] | None = None, outro_html: str = "") -> str:
    """The page: `rows` hold the shown fields plus `record` (the full row, shown on hover)."""
    data = {"rows": rows, "columns": columns, "filters": filters, "chart": chart, "colours": colours or {}}
    charts = ('<h2>Plots</h2><p>TFLOP/s against length for the rows the filters leave, a panel per mask and '
              'direction; hover a point for its row. Dashed: the measured matmul peak; dotted: the '
              'datasheet peak (dense).</p>'
              '<div id="legend" class="legend"></div><div id="charts"></div>') if chart else ""
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{intro_html}\n"
            '<h2>Filters</h2><div id="filters" class="filters"></div><p id="count"></p>'
            f"{charts}<h2>Rows</h2><p>Click a column to sort; hover a row for its full record.</p>"
            '<table id="rows"><thead><tr></tr></thead><tbody></tbody></table>'
            f'<div id="detail"></div>{outro_html}\n'
            f'<script type="application/json" id="data">{_json_for_script(data)}</script>\n'
            f"<script>{SCRIPT}</script>\n</body></html>\n")


REPORT_COLUMNS: list[dict[str, Any]] = [
    {"key": "column", "label": "kernel"}, {"key": "mask", "label": "mask"}, {"key": "seqlen", "label": "seqlen"},
    {"key": "direction", "label": "direction"}, {"key": "heads", "label": "heads"},
    {"key": "head_dim", "label": "head_dim"}, {"key": "dtype", "label": "dtype"},
    {"key": "world_size", "label": "world size"}, {"key": "state", "label": "status"},
    {"key": "tflops", "label": "TFLOP/s", "num": True, "digits": 1, "small": True},
    {"key": "spread", "label": "p80/p20", "num": True, "digits": 2},
    {"key": "of_peak", "label": "of matmul peak", "num": True, "digits": 2},
    {"key": "of_datasheet", "label": "of datasheet", "num": True, "digits": 2},
    {"key": "ms_median", "label": "ms", "num": True, "digits": 3},
    {"key": "peak_gib", "label": "peak GiB", "num": True, "digits": 2},
    {"key": "checked", "label": "checked"}, {"key": "source", "label": "results"},
    {"key": "reason", "label": "reason"},
]
REPORT_FILTERS = [{"key": k, "label": {"column": "kernel", "state": "status", "source": "results"}.get(k, k)}
                  for k in ("mask", "seqlen", "column", "direction", "dtype", "heads", "state", "source")]


def _hex(rgb: Any) -> str:
    return "#" + "".join(f"{round(c * 255):02x}" for c in rgb[:3])


def report_page(results: Results, markdown_text: str) -> str:
    """The report as a page: the markdown report's header, then the interactive rows and plots."""
    from .plots import colour
    from .report import header

    shown = []
    for r in results.rows:
        shown.append({
            "column": r["column"], "mask": analysis.mask_label(r), "seqlen": r["seqlen"], "direction": r["direction"],
            "heads": analysis.heads_label(r), "head_dim": r["head_dim"], "dtype": r["dtype"],
            "world_size": r.get("world_size") or 1, "cp": bool(r.get("strategy")),
            "state": analysis.cell_state(r) + (" (sim)" if analysis.is_simulated(r) else ""),
            "tflops": r.get("tflops"), "spread": analysis.spread(r), "of_peak": analysis.of_peak(r),
            "of_datasheet": analysis.of_datasheet(r),
            "ms_median": r.get("ms_median"),
            "peak_gib": r["peak_mem_bytes"] / 2**30 if r.get("peak_mem_bytes") else None,
            "checked": r.get("checked") or ("no" if analysis.is_unchecked(r) else "yes"),
            "source": r.get("source"), "reason": (r.get("reason") or "")[:120],
            "record": {k: v for k, v in r.items() if k != "iter_times_ms"},
        })
    colours = {c: _hex(colour(c.split(" ")[0].split("/")[0])) for c in {r["column"] for r in results.rows}}
    peaks = [r["matmul_peak_tflops"] for r in results.rows if r.get("matmul_peak_tflops")]
    sheets = [r["datasheet_peak_tflops"] for r in results.rows if r.get("datasheet_peak_tflops")]
    chart = {"y": "tflops", "ylabel": "TFLOP/s", "peak": analysis.median(peaks), "sheet": max(sheets, default=None)}
    intro = markdown_to_html(header(results))
    tables_md = markdown_text[markdown_text.index("## TFLOP/s"):] if "## TFLOP/s" in markdown_text else ""
    tables_md = tables_md.split("\n## Plots")[0]
    outro = ("<details><summary>The markdown report's tables</summary>" + markdown_to_html([tables_md])
             + "</details>") if tables_md else ""
    return page("longca report", intro, shown, REPORT_COLUMNS, REPORT_FILTERS, chart, colours, outro)
