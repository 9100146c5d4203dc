"""`nbs/results/README.md`, the index of the committed results (#69): it lists every result under `nbs/results` (none
missing, none gone), and every result is cited by a page, a test, a script or a research diary entry, by path, by name,
by a glob or by a folder scan that reads it. Fast: text and JSON only, no model (`research/results_index.py`)."""
import importlib.util, json, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('results_index', ROOT/'research'/'results_index.py')
ri = importlib.util.module_from_spec(_spec)
sys.modules['results_index'] = ri # dataclasses look their module up
_spec.loader.exec_module(ri)
REGENERATE = 'run `python research/results_index.py` and commit nbs/results/README.md'


@pytest.fixture(scope='module')
def found(): return ri.collect()


def test_the_index_lists_every_result(found):
    listed = ri.index_keys(ri.INDEX.read_text(encoding='utf-8'))
    keys = [r.key for r in found]
    assert len(listed) == len(set(listed)), [k for k in listed if listed.count(k) > 1]
    assert not (missing := [k for k in keys if k not in listed]), f'not in the index: {missing}; {REGENERATE}'
    assert not (gone := [k for k in listed if k not in keys]), f'listed, not in nbs/results: {gone}; {REGENERATE}'
    on_disk = {p.name for p in ri.RESULTS.iterdir() if p.is_dir()}
    assert on_disk == {r.group for r in found} # no folder of nbs/results is left out


def test_every_result_is_cited(found):
    uncited = [f'{r.key} ({r.size() / 1e3:.0f} kB)' for r in found if not r.cited]
    assert not uncited, (f'nothing cites {uncited}: cite each from the page or the diary entry it is evidence for, '
                         f'or `git rm -r` it')


def test_every_folder_scan_is_known():
    # A page that reads every run of a folder cites each run its figures could change; the index must know it,
    # or a run it reads could look uncited and be removed.
    assert ri.unknown_scans() == [], 'a new folder scan of nbs/results: add it to SCANS in research/results_index.py'


def test_a_result_is_cited_by_path_glob_name_or_scan(tmp_path):
    res = tmp_path/'nbs'/'results'
    for run in ('strat-front-austen', 'strat-front-held-austen', 'strat-held-wikitext2', 'speed-2k', 'kivi-only',
                'orphan', 'headline'):
        (res/'bench'/run).mkdir(parents=True)
        rows = [{'strategy': 'kivi:bits=2' if run == 'kivi-only' else 'full', 'protocol': 'ppl'}]
        (res/'bench'/run/'results.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    (res/'peaks').mkdir()
    for f in ('1k-released.json', '2k-default-allocator.json', '4096.log', '4096.txt', 'lonely.json'):
        (res/'peaks'/f).write_text('{}')
    (tmp_path/'tests').mkdir()
    (tmp_path/'tests'/'test_x.py').write_text(
        "BENCH = 'results/bench'\nrows = read(BENCH/f'strat-held-{text}')\n"
        "peaks = lambda n: load(nbs_path()/'results'/'peaks'/f'{n}.json')\n"
        "n = [peaks(f'{n}-default-allocator') for n in 'ab']\n")
    (tmp_path/'DIARY.md').write_text(
        "# diary\n\n## 2026-01-01 — First\n\nThe front (`nbs/results/bench/strat-front-*`), and\n"
        "`kvstrat-bench --out nbs/results/bench/speed-\n  2k`; `nbs/results/peaks/4096.txt`, peaks('1k-released').\n")
    scan = "runs = {f.parent.name: rows(f) for f in sorted(Path('results/bench').glob('*/results.jsonl'))}"
    (tmp_path/'nbs'/'16_report.ipynb').write_text(json.dumps({'cells': [{'cell_type': 'code', 'source': [scan]}]}))
    cited = {r.key: sorted(r.cited) for r in ri.collect(tmp_path)}
    assert cited == {
        'bench/headline/': [], # a plain word: cited by path alone
        'bench/kivi-only/': ['nbs/16_report.ipynb'], # its kivi rows are read by the report's scan
        'bench/orphan/': [],
        'bench/speed-2k/': ['DIARY.md 2026-01-01 #001'], # a path the prose wrapped
        'bench/strat-front-austen/': ['DIARY.md 2026-01-01 #001'], # a glob (which also matches -held-)
        'bench/strat-front-held-austen/': ['DIARY.md 2026-01-01 #001'],
        'bench/strat-held-wikitext2/': ['tests/test_x.py'], # an f-string over the texts
        'peaks/1k-released.json': ['DIARY.md 2026-01-01 #001'], # a hyphenated stem
        'peaks/2k-default-allocator.json': ['tests/test_x.py'], # an f-string's glob, beside its folder's name
        'peaks/4096.{log,txt}': ['DIARY.md 2026-01-01 #001'], # one result: the files of one stem
        'peaks/lonely.json': []}


def test_check_mode_passes():
    r = subprocess.run([sys.executable, str(ROOT/'research'/'results_index.py'), '--check'], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
