"""Reports a reader trusts at a glance: presets name the rows, FullKV is the 1.00× reference, each family's Pareto
front, labels that do not overlap, the worst window beside every pooled ΔPPL, two texts side by side, and the HTML
report opened and sorted in Debian's headless Chromium (skipped, with the reason, where it is missing).

Fast: hand-made rows and copies of the committed `nbs/results/bench/*/results.jsonl`, no model."""
import base64, json, re, shutil, subprocess
from pathlib import Path
import pytest
from bs4 import BeautifulSoup
from kvstrat.policy import STRATEGY_PRESETS, make_strategy
from kvstrat.report import (family_fronts, plot_headline, plot_pareto, preset_name, results_table, strategy_lines,
                            write_report)
from kvstrat.results import Results, new_row, strategy_params

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT/'nbs'/'results'/'bench'
CHROMIUM = Path('/usr/bin/chromium')
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--no-first-run', '--allow-file-access-from-files']
SETTINGS = dict(windows=2, prefill=4, score=4, chunk=2)


def committed(run: str) -> list[dict]: return Results(BENCH/run, repair=False).rows


def row(text: str, compression: float, pct: float, **fields) -> dict:
    "A ppl row of `make_strategy(text)` on model m."
    s = make_strategy(text)
    return new_row(**{'strategy': s.label, 'params': strategy_params(s), 'protocol': 'ppl', 'model': 'm', 'text': 't',
                      'settings': SETTINGS, 'ppl': 20 * (1 + pct / 100), 'delta_ppl': 0.2 * pct,
                      'delta_ppl_pct': pct, 'delta_nll': pct / 100, 'delta_nll_se': 0.01, 'compression': compression,
                      'window_nll': [2.0, 3.0], **fields})


def test_presets_resolve_and_name_rows():
    assert make_strategy('kivi-4-best') == make_strategy(STRATEGY_PRESETS['kivi-4-best'])
    assert make_strategy('kivi-4-best').scale_bits == 8 and make_strategy('kivi-3').bits == 3
    assert preset_name(make_strategy('kivi:bits=2').label) == 'kivi-2'
    kivis = {r['strategy']: preset_name(r) for run in ('full', 'ppl-8w-kernels', 'gpu', 'speed-2k')
             for r in committed(run) if r['strategy'].startswith('kivi:')}
    assert sorted(set(kivis.values())) == ['kivi-2', 'kivi-2-g64', 'kivi-4', 'kivi-4-best', 'kivi-4-g64',
                                           'kivi-4-token'] # every KIVI variant measured has a name
    table = results_table(committed('ppl-8w-kernels'))
    assert '| kivi-4-best | ' in table and '`kivi-4-best` = `kivi:group=16,residual=10,key_axis=token' in table


def test_fronts_on_hand_made_rows():
    rows = [row('full', 0.5, 0.0), row('int8', 2, 0.1), row('int4', 4, 9), row('kivi', 3, 0.4),
            row('kivi:bits=2', 5, 20), row('kivi:group=64', 3, 1.0), row('kivi:residual=64', 2.5, 0.5),
            row('h2o', 2, 18), row('snapkv', 1.5, 14), row('streamingllm', 2, 25), row('keynorm', 1.2, 40)]
    fronts = {f: [preset_name(r) for r in front] for f, front in family_fronts(rows).items()}
    assert fronts == {'FullKV': ['full'], 'quantisers': ['int8', 'kivi-4', 'int4', 'kivi-2'],
                      'eviction': ['snapkv', 'h2o']}


def test_labels_do_not_overlap(tmp_path):
    "Eight labels, five of them on points a few pixels apart: adjustText leaves no two boxes overlapping."
    rows = [row('full', 0.5, 0.0), row('int8', 1.94, 0.02), row('kivi', 3.12, 0.36), row('kivi:group=64', 3.12, 0.79),
            row('kivi-4-best', 3.52, 0.66), row('kivi-4-token', 3.55, 1.15), row('int4', 3.76, 9.4),
            row('kivi:bits=2', 5.0, 20.3)]
    fig = plot_pareto(rows, tmp_path/'pareto.png')
    renderer = fig.canvas.get_renderer()
    labels = [t for t in fig.axes[0].texts if t.get_text()]
    assert len(labels) == 8
    boxes = [t.get_window_extent(renderer) for t in labels]
    overlaps = [(labels[i].get_text(), labels[j].get_text()) for i in range(8) for j in range(i + 1, 8)
                if boxes[i].overlaps(boxes[j])]
    assert not overlaps, overlaps
    assert (tmp_path/'pareto.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_fullkv_shown_at_1x(tmp_path):
    rows = committed('full')
    full = next(r for r in rows if r['strategy'] == 'full' and r['protocol'] == 'ppl')
    assert full['compression'] == 0.5 # the row keeps what was measured: float32 on the CPU
    table = results_table(rows)
    assert re.search(r'^\| full \| 18\.510 \| .* \| 1\.00× \|', table, re.M), table
    assert ("FullKV, the reference, is shown at 1.00×: it stores the model's dtype (float32 on the CPU holds 2× the "
            "fp16 bytes), measured here at 0.50×.") in table
    black = [c.get_offsets().tolist() for c in plot_pareto(rows, tmp_path/'p.png').axes[0].collections
             if c.get_label() == 'FullKV']
    assert black == [[[1.0, 0.0]]] # the FullKV point sits at 1×


def test_worst_window_column():
    rows = committed('ppl-8w-kernels')
    full, h2o = (next(r for r in committed('full') if r['strategy'] == s and r['protocol'] == 'ppl')
                 for s in ('full', 'h2o:budget=0.5,sinks=4,window=32,adaptive_heads=False,mean=False'))
    lines = {preset_name(r): cells for r, cells in strategy_lines(committed('full'))}
    expected = max(a - b for a, b in zip(h2o['window_nll'], full['window_nll']))
    assert lines['h2o'][-1] == (f'{expected:+.3f}', expected) and expected > 3 * h2o['delta_nll'] # one window collapses
    assert lines['full'][-1] == ('+0.000', 0.0)
    assert all(cells[-1][1] is not None for _, cells in strategy_lines(rows)) # every ppl row of 8 windows has one


def two_texts(tmp_path) -> Path:
    "The committed ppl-8w-kernels rows, and the same rows as if measured on austen with one window worse."
    rows = committed('ppl-8w-kernels')
    worse = lambda r: [w + 0.5 * (i == 3 and r['strategy'] != 'full') for i, w in enumerate(r['window_nll'])]
    austen = [dict(r, text='austen', delta_ppl_pct=2 * r['delta_ppl_pct'], window_nll=worse(r)) for r in rows]
    out = tmp_path/'two'; out.mkdir()
    (out/'results.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows + austen))
    return out


def test_report_on_two_texts(tmp_path):
    out = two_texts(tmp_path)
    md = write_report(out)
    assert [l for l in md.splitlines() if l.startswith('## ')] == [
        '## smollm2-135m · every text', '## smollm2-135m · wikitext2', '## smollm2-135m · austen',
        '## smollm2-135m · wikitext2 · ΔNLL per window', '## smollm2-135m · austen · ΔNLL per window']
    head = next(l for l in md.splitlines() if l.startswith('| strategy | compression |'))
    assert head == ('| strategy | compression | wikitext2 ΔPPL % | wikitext2 worst window ΔNLL | austen ΔPPL % | '
                    'austen worst window ΔNLL |')
    int8 = next(l for l in md.splitlines() if l.startswith('| int8 | 1.94× | +0.03'))
    assert float(int8.split('|')[-2]) > 0.45 > float(int8.split('|')[-4]), int8 # austen's worse window shows
    per_window = md.split('## smollm2-135m · austen · ΔNLL per window')[1]
    int8 = [float(x) for x in next(l for l in per_window.splitlines() if l.startswith('| int8 |')).split('|')[3:-1]]
    assert len(int8) == 8 and max(int8) == int8[3] > 0.45 > max(int8[:3] + int8[4:]), int8 # the window made worse
    rows = Results(out, repair=False).rows
    assert len(plot_headline(rows, tmp_path/'h.png').axes) == 2 and len(plot_pareto(rows, tmp_path/'p.png').axes) == 2


def test_html_report_static(tmp_path):
    out = tmp_path/'full'; out.mkdir(); shutil.copy(BENCH/'full'/'results.jsonl', out)
    write_report(out)
    s = BeautifulSoup((out/'report.html').read_text(encoding='utf-8'), 'html.parser') # the table, ΔNLL per window
    assert len(s.select('table.sortable')) == 2 and s.find('script') and 'aria-sort' in s.find('script').string
    imgs = [i['src'] for i in s.find_all('img')]
    assert len(imgs) == 2 and all(base64.b64decode(i.split(',', 1)[1])[:4] == b'\x89PNG' for i in imgs)
    assert 'NVIDIA' not in s.get_text() and 'cpu (torch threads: 1)' in s.get_text() # the device and the commit
    assert re.search(r'\([0-9a-f]{40}', s.get_text())
    best = s.find('td', string='kivi-4-best')
    assert best['title'].startswith('kivi:bits=4,group=16,value_group=None,residual=10')


needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} not found: install Debian's chromium "
                                    '(`apt-get install -y chromium`) to open the HTML report in a real browser')


def dom(tmp_path, page: Path) -> BeautifulSoup:
    r = subprocess.run([str(CHROMIUM), *FLAGS, f'--user-data-dir={tmp_path/"profile"}', '--dump-dom', page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return BeautifulSoup(r.stdout, 'html.parser')


@needs_chromium
def test_html_report_opens_and_sorts(tmp_path):
    out = tmp_path/'full'; out.mkdir(); shutil.copy(BENCH/'full'/'results.jsonl', out)
    write_report(out)
    s = dom(tmp_path, out/'report.html')
    table = s.select_one('table.sortable')
    assert [th.get_text() for th in table.find_all('th')][:4] == ['strategy', 'PPL', 'ΔPPL (±se)', 'ΔPPL %']
    assert len(table.tbody.find_all('tr')) == len({r['strategy'] for r in Results(out, repair=False).rows})
    assert all(i['src'].startswith('data:image/png;base64,') for i in s.find_all('img')) and len(s.find_all('img')) == 2
    # click 'ΔPPL %' once (ascending), then 'compression' twice (descending), as a reader would
    html = (out/'report.html').read_text(encoding='utf-8')
    clicks = ("<script>const h = document.querySelector('table.sortable').tHead.rows[0].cells;"
              "h[3].click(); document.body.dataset.first = [...document.querySelector('tbody').rows]"
              ".map(r => r.cells[0].textContent).join(','); h[4].click(); h[4].click();</script>")
    (out/'clicked.html').write_text(html.replace('</body>', clicks + '</body>'), encoding='utf-8')
    s = dom(tmp_path, out/'clicked.html')
    by_pct = s.body['data-first'].split(',')
    assert by_pct[:2] == ['full', 'int8'] and by_pct[-1] == 'keynorm', by_pct
    ths = s.select_one('table.sortable').find_all('th')
    assert ths[4].get('aria-sort') == 'descending' and ths[3].get('aria-sort') is None
    comp = [float(tr.find_all('td')[4]['data-sort']) for tr in s.select_one('table.sortable').tbody.find_all('tr')]
    assert comp == sorted(comp, reverse=True) and comp[0] == pytest.approx(5.0109, abs=1e-3)
