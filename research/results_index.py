"""Write `nbs/results/README.md`, the index of the committed results: each one's date, commit, purpose and citers.

One row per result, with the pages, tests, scripts and research diary entries that cite it (issue #69).

    python research/results_index.py           # (re)write nbs/results/README.md
    python research/results_index.py --check   # exit 1 if the index is stale or a result is cited nowhere
    python research/results_index.py --uncited # list the results nothing cites, with their sizes

A result is a `kvstrat-bench` run folder (one holding `results.jsonl` or `results.md`: `bench/*`, `streaming/ppl`, ...)
or, elsewhere, the files of one folder that share a stem (`long-prefill/4096.log` and `4096.txt` are one result).

A result is cited when a notebook (its cells' sources; outputs are not read), README.md, DIARY.md (an entry, named by
its date), a `nbs/*.qmd` page, a test, a research script, the Makefile or `.ci/` names it:
- by path, `results/GROUP/NAME` (or `GROUP/NAME`, as research/README.md writes them) or a glob of one
  (`results/bench/strat-front-*`, `results/stratigraphic/{a,b}.jsonl`, `--out nbs/results/bench/strat-held-$t`; a
  path the prose wrapped after a hyphen is joined), or the folder `results/GROUP` itself (every result in it; but
  `results/bench` alone is only ever "the runs committed under it", so it cites none);
- by name: a run's folder name, a file's name, a hyphenated file stem (`peaks('1k-released')`), or a glob of one
  with at least four letters or digits besides the wildcards and the extension (`gemma-front-*`; an f-string's field
  reads as `*`: `f'{n}-default-allocator'`, which must name the file's folder on the same line); a quoted `'PREFIX'`
  cites `PREFIX-wikitext2`, `PREFIX-austen` and `PREFIX-python`, the runs of `f'{run}-{text}'`; a name that is also a
  word or a number (`full`, `pareto.png`, `20.json`) only by path, or where its line names its folder (a file) or
  its page quotes its folder (`'bench'`, a run);
- or by a folder scan (`SCANS`): code that reads every run of a folder (a glob, `iterdir`, `bench_runs`) cites each
  run whose removal could change what it computes. `unknown_scans` finds a folder read that `SCANS` does not know.
Nothing here imports kvstrat or torch: it reads text and JSON, and asks `git log` for dates and commits."""
import argparse, fnmatch, json, re, subprocess, sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT/'nbs'/'results'
INDEX = RESULTS/'README.md'
TEXTS = ('wikitext2', 'austen', 'python') # the texts a run's name ends in: f'{run}-{text}'
P_SETTINGS = dict(windows=8, prefill=512, score=512, chunk=16) # protocol P, as nbs/11d's committed_rows reads it
SELF = ('research/results_index.py', 'scripts/results_index.py', 'tests/test_results_index.py')

# %% results

@dataclass
class Result:
    key: str # relative to nbs/results: 'bench/strat-front-austen/' (a run folder) or 'peaks/1k-trim.json'
    group: str # the top folder: 'bench', 'peaks', ...
    name: str # a run folder's name, or a file group's stem
    paths: list # its files or its folder
    is_run: bool
    cited: dict = field(default_factory=lambda: defaultdict(set)) # citer -> how ('path', 'name', 'scan: ...')

    @property
    def names(self) -> list[str]: return [self.name] if self.is_run else [p.name for p in self.paths] + [self.name]
    def files(self) -> list[Path]:
        return sorted(f for p in self.paths for f in ([p] if p.is_file() else p.rglob('*')) if f.is_file()
                      and f.name != '.lock')
    def size(self) -> int: return sum(f.stat().st_size for f in self.files())
    def rows(self) -> list[dict]:
        f = self.paths[0]/'results.jsonl'
        if not (self.is_run and f.is_file()): return []
        out = []
        for l in f.read_text(encoding='utf-8').splitlines():
            try: out.append(json.loads(l))
            except ValueError: pass
        return out

def is_run(d:Path) -> bool: return d.is_dir() and ((d/'results.jsonl').is_file() or (d/'results.md').is_file())

def results(root:Path=RESULTS) -> list[Result]:
    "Every result under `root`: run folders, and elsewhere each folder's files grouped by stem."
    out = []
    def walk(d:Path):
        stems = defaultdict(list)
        for p in sorted(d.iterdir()):
            if p.name.startswith('.') or p == root/'README.md': continue
            if is_run(p):
                rel = p.relative_to(root)
                out.append(Result(rel.as_posix() + '/', rel.parts[0], p.name, [p], True))
            elif p.is_dir(): walk(p)
            else: stems[p.name.split('.')[0]].append(p)
        for stem, ps in stems.items():
            rel = ps[0].relative_to(root)
            exts = ','.join(p.name[len(stem) + 1:] for p in ps)
            key = (rel.parent/(ps[0].name if len(ps) == 1 else f'{stem}.{{{exts}}}')).as_posix() # 4096.{log,txt}
            out.append(Result(key, rel.parts[0], stem, ps, False))
    for d in sorted(root.iterdir()):
        if d.is_dir() and not d.name.startswith('.'): walk(d)
    return out

# %% citers

def _cells(nb:Path) -> list[str]:
    return [''.join(c.get('source', '')) for c in json.loads(nb.read_text(encoding='utf-8')).get('cells', [])]

def citers(root:Path=ROOT) -> list[tuple[str, str]]:
    "(label, text) of every place a result can be cited: notebooks' cells, README, DIARY entries, tests, scripts."
    out = []
    for nb in sorted((root/'nbs').glob('*.ipynb')): out.append((f'nbs/{nb.name}', '\n'.join(_cells(nb))))
    for f in sorted((root/'nbs').glob('*.qmd')): out.append((f'nbs/{f.name}', f.read_text(encoding='utf-8')))
    if (root/'README.md').is_file(): out.append(('README.md', (root/'README.md').read_text(encoding='utf-8')))
    if (root/'DIARY.md').is_file(): out += diary_entries((root/'DIARY.md').read_text(encoding='utf-8'))
    for pattern in ('tests/*.py', 'research/*.py', 'research/*.sh', 'research/*.md', 'scripts/*.py', 'scripts/*.sh',
                    'scripts/*.md', '.ci/*', 'Makefile'):
        for f in sorted(root.glob(pattern)):
            rel = f.relative_to(root).as_posix()
            if f.is_file() and rel not in SELF: out.append((rel, f.read_text(encoding='utf-8', errors='replace')))
    return out

DIARY_HEADING = re.compile(r'^## (\d{4}-\d{2}-\d{2})\s*[—-]*\s*(.*)$', re.M)

def diary_entries(text:str) -> list[tuple[str, str]]:
    "('DIARY.md YYYY-MM-DD #N', entry text) for each dated entry (the N-th of the diary), its heading included."
    starts = list(DIARY_HEADING.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [(f'DIARY.md {m[1]} #{i + 1:03d}', text[m.start():end]) for i, (m, end) in enumerate(zip(starts, ends))]

def diary_titles(text:str) -> dict[str, str]:
    "A diary entry's label (as `diary_entries` names it) -> its title."
    return {f'DIARY.md {m[1]} #{i + 1:03d}': m[2].strip() for i, m in enumerate(DIARY_HEADING.finditer(text))}

# %% citations

PATH = re.compile(r"results/([A-Za-z0-9_.-]+)(?:/([A-Za-z0-9_.*{},-]*[A-Za-z0-9_*}-]))?")
TOKEN = re.compile(r"[A-Za-z0-9_.*{},-]+")
QUOTED = re.compile(r"""['"]([A-Za-z0-9_.-]+)['"]""")
WILD = re.compile(r'\{[^{},]*\}') # an f-string's field
SHELL_VAR = re.compile(r'\$\{?[A-Za-z_]\w*\}?')
WRAPPED = re.compile(r'(results/[A-Za-z0-9_./{},*-]*[-,{])\n[ \t]*') # a path the prose wrapped after - , or {

def expand(token:str) -> list[str]:
    "A token as glob patterns: `{a,b}` alternatives expanded, an f-string's `{field}` read as `*`."
    token = WILD.sub('*', token)
    if m := re.search(r'\{([^{}]*)\}', token):
        return [x for alt in m[1].split(',') for x in expand(token[:m.start()] + alt + token[m.end():])]
    return [token]

def _literal(pattern:str) -> str: return re.sub(r'[^A-Za-z0-9]', '', pattern.replace('*', ''))

def cite(found:list[Result], texts:list[tuple[str, str]]):
    "Record in each result's `cited` the texts that name it, by path or by name."
    by_group = defaultdict(list)
    for r in found: by_group[r.group].append(r)
    by_name = defaultdict(list)
    for r in found:
        for n in r.names: by_name[n].append(r)
    rel = re.compile(rf"(?<![\w/.-])({'|'.join(map(re.escape, by_group))})/"
                     r"([A-Za-z0-9_.*{},-]*[A-Za-z0-9_*}-]|(?=`))") # GROUP/NAME, or `GROUP/`
    for label, text in texts:
        text = WRAPPED.sub(r'\1', SHELL_VAR.sub('*', text)) # `--out nbs/results/bench/strat-held-$t`, wrapped paths
        for m in [*PATH.finditer(text), *rel.finditer(text)]: # results/GROUP[/NAME], or GROUP/NAME, or `GROUP/`
            group, rest = m[1], m[2]
            if group not in by_group: continue
            first = (rest or '').split('/')[0]
            if not any(_literal(_stem(x)) for x in expand(first)): # the folder, or all of it (`bench/*/results.jsonl`)
                if group != 'bench': # `nbs/results/bench/` alone is only "the runs committed under it"
                    for r in by_group[group]: r.cited[label].add('folder')
                continue
            written = re.search(r'(--out\s+|OUT=)\S*$', text[max(0, m.start() - 40):m.start()]) # the run's command
            how = 'path, written' if written else 'path'
            for pattern in expand(first):
                for r in by_group[group]:
                    if any(fnmatch.fnmatchcase(n, pattern) for n in r.names) or (
                        r.is_run and fnmatch.fnmatchcase(r.key, f'{group}/{pattern}/*')): r.cited[label].add(how)
        for line in text.splitlines():
            for token in set(TOKEN.findall(line)):
                for pattern in expand(token.strip('.,')):
                    if '*' not in pattern:
                        for r in by_name.get(pattern, []):
                            if r.is_run: named = not _plain(pattern) or f"'{r.group}'" in text
                            else: named = not _plain(pattern.split('.')[0]) or _names_group(line, r.group)
                            if named: r.cited[label].add('name')
                        continue
                    if len(_literal(_stem(pattern))) < 4: continue # `*.json`, `*-*`: too wide to name anything
                    for r in found:
                        if r.is_run and pattern.startswith('*'): continue # f'{run}-{text}': see QUOTED below
                        if not (r.is_run or _names_group(line, r.group)): continue
                        if any(fnmatch.fnmatchcase(n, pattern) for n in r.names if not _plain(n)):
                            r.cited[label].add('glob')
        for lit in set(QUOTED.findall(text)): # f'{run}-{text}' over quoted runs
            for t in TEXTS:
                for r in by_name.get(f'{lit}-{t}', []):
                    if r.is_run: r.cited[label].add('name')

def _names_group(line:str, group:str) -> bool: return re.search(rf'(?<![\w-]){re.escape(group)}(?![\w-])', line) is not None

def _stem(pattern:str) -> str: return re.sub(r'\.[A-Za-z]+$', '', pattern)

def _plain(name:str) -> bool:
    "A name that is also an everyday word or a number (`full`, `default`, `pareto`, `20`): cited by path alone."
    return '-' not in name and '_' not in name and '.' not in name or re.fullmatch(r'[\d.]+\w*', name) is not None

# %% folder scans

@dataclass
class Scan:
    page: str # the page whose code reads the folder
    code: str # a regex its code must still match for the scan to count
    what: str # what the scan reads, in words
    cites: object # Result -> bool: the results whose removal could change what it computes

def _bench_rows(pred): # Result -> whether it is a bench run with a row that `pred` holds for
    return lambda r: r.group == 'bench' and r.is_run and any(pred(x) for x in r.rows())

def _kivi(x:dict) -> bool: return str(x.get('strategy', '')).startswith('kivi:')

def _protocol_p_stratigraphic(x:dict) -> bool: # nbs/11d's committed_rows, then todays_default, at its widest
    return (x.get('protocol') == 'ppl' and str(x.get('strategy', '')).startswith('stratigraphic') and
            x.get('model') == 'smollm2-135m' and x.get('text') in ('wikitext2', 'austen') and
            x.get('settings') == P_SETTINGS)

SCANS = [
    Scan('nbs/16_report.ipynb', r"Path\('results/bench'\)\.glob\('\*/results\.jsonl'\)",
         "every run's rows, for the set of kivi presets measured", _bench_rows(_kivi)),
    Scan('nbs/11d_stratigraphic_measured.ipynb', r"sorted\(\(nbs_path\(\)/'results'/'bench'\)\.iterdir\(\)\)",
         "every run's protocol-P Stratigraphic rows (committed_rows, today's default against every other family)",
         _bench_rows(_protocol_p_stratigraphic)),
    Scan('nbs/index.ipynb', r"^show_results\(\)|bench_runs\(\)",
         "the most complete run (bench_runs()[0]), shown as the headline", lambda r: r.key == _headline()),
    Scan('nbs/18_docs.ipynb', r"^show_results\(\)", "the most complete run (bench_runs()[0]), shown as an example",
         lambda r: r.key == _headline()),
    Scan('tests/test_docs.py', r"bench_runs\(\)", "the most complete run (bench_runs()[0]), checked on the site",
         lambda r: r.key == _headline()),
    Scan('nbs/stratigraphic_design.ipynb', r"show_other_results\(\)|show_ablation\(",
         "every JSON, JSON Lines and run folder in stratigraphic/ (result_files), and a JSON's PNG",
         lambda r: r.group == 'stratigraphic' and (r.is_run or any(p.suffix in ('.json', '.jsonl') for p in r.paths))),
]

# Lines that read a folder without being a scan of committed results: kvstrat.docs' own definitions and their tests
# on temporary folders, a made-up notebook cell, a report test's temporary folder.
NOT_SCANS = [('nbs/18_docs.ipynb', r"def |\b(bench_runs|result_files)\((root|d|Path\(d\))(?=[\s)/])|root\.iterdir\(\)"),
             ('nbs/18a_preview.ipynb', r"new_code_cell\('show_results\(\)'"),
             ('nbs/16_report.ipynb', r"\bd\.iterdir\(\)"),
             ('tests/test_research.py', r"\.glob\(path\b")] # that each result research/README.md names exists
FOLDER_READ = re.compile(r"iterdir\(|\.r?glob\(|bench_runs\(|result_files\(|show_results\(\)|show_other_results\(|"
                         r"show_ablation\(|listdir\(|os\.walk\(")

def unknown_scans(texts:list[tuple[str, str]]|None=None) -> list[str]:
    ("Lines that read a folder of results (a glob, iterdir, bench_runs, ...) that neither `SCANS` nor `NOT_SCANS` "
     "accounts for, and whose glob names no result (`glob('pareto*.jsonl')` does, as a glob of a name does).")
    out = []
    for label, text in texts or citers():
        for line in text.splitlines():
            if not (FOLDER_READ.search(line) and re.search(r"results|bench|BENCH|'stratigraphic'", line)): continue
            if any(s.page == label and re.search(s.code, line.strip(), re.M) for s in SCANS): continue
            if any(page == label and re.search(code, line) for page, code in NOT_SCANS): continue
            g = re.search(r"glob\('([^']+)'\)", line)
            if g and not g[1].startswith('*') and len(_literal(_stem(g[1]))) >= 4: continue # names its results
            out.append(f'{label}: {line.strip()}')
    return out

_HEADLINE = {}

def _headline(root:Path=RESULTS) -> str|None:
    "The run kvstrat.docs.bench_runs puts first: most protocols, then last changed (its last commit), then name."
    if root not in _HEADLINE:
        runs = [r for r in results(root) if r.group == 'bench' and r.key.count('/') == 2 and r.is_run]
        stamp = last_commit_times(root)
        key = lambda r: (len({x.get('protocol') for x in r.rows()}), stamp.get(r.key, float('inf')), r.name)
        _HEADLINE[root] = max(runs, key=key).key if runs else None
    return _HEADLINE[root]

def scan(found:list[Result], texts:list[tuple[str, str]]):
    "Record the folder scans still in their pages."
    pages = dict(texts)
    for s in SCANS:
        if s.page in pages and re.search(s.code, pages[s.page], re.M):
            for r in found:
                if s.cites(r): r.cited[s.page].add(f'scan: {s.what}')

# %% git

def _git(*args) -> str:
    try: return subprocess.run(['git', *args], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError): return ''

def _history(root:Path=RESULTS) -> list[tuple[str, str, int, list[str]]]:
    "(commit, date, unix time, paths) of every commit that touched `root`, newest first."
    out = []
    log = _git('log', '--format=%x00%H %cs %ct', '--name-only', '--', root.relative_to(ROOT).as_posix())
    for block in log.split('\0')[1:]:
        head, *paths = block.strip().splitlines()
        h, d, t = head.split()
        out.append((h, d, int(t), [p for p in paths if p]))
    return out

def last_commit_times(root:Path=RESULTS) -> dict[str, int]:
    "Result key -> when a commit last touched it."
    out, prefix = {}, root.relative_to(ROOT).as_posix() + '/'
    for _, _, t, paths in reversed(_history(root)):
        for p in paths:
            if p.startswith(prefix): out[p[len(prefix):].rsplit('/', 1)[0] + '/'] = t
    return out

def first_commits(root:Path=RESULTS) -> dict[str, tuple[str, str]]:
    "File path under nbs/results -> (commit, date) that first added it."
    out, prefix = {}, root.relative_to(ROOT).as_posix() + '/'
    for h, d, _, paths in _history(root): # newest first: the oldest wins
        for p in paths:
            if p.startswith(prefix): out[p[len(prefix):]] = (h[:7], d)
    return out

def commit_dates() -> dict[str, str]:
    "Commit (full and 7-hex) -> its date."
    out = {}
    for l in _git('log', '--all', '--format=%H %cs').splitlines():
        h, d = l.split()
        out[h], out[h[:7]] = d, d
    return out

# %% the index

def _one_line(s:str, n:int=160) -> str:
    s = ' '.join(str(s).split()).replace('|', '\\|')
    return s if len(s) <= n else s[:n - 1].rstrip() + '…'

def _short(commits:list[str]) -> str:
    cs = list(dict.fromkeys(c[:7] for c in commits if c))
    return ', '.join(cs[:3]) + (f' (+{len(cs) - 3})' if len(cs) > 3 else '')

def describe(r:Result, firsts:dict, dates:dict, titles:dict) -> tuple[str, str, str]:
    "(date, commit, purpose) of a result: from its rows or metadata, else git; its purpose from the diary or metadata."
    rel = [f.relative_to(RESULTS).as_posix() for f in r.files()]
    added = sorted((firsts[f] for f in rel if f in firsts), key=lambda x: x[1])
    commit, date, purpose = '', '', ''
    if rows := r.rows():
        measured = [x.get('git_commit') for x in rows if x.get('git_commit')]
        commit = _short(measured)
        date = max((dates.get(c, '') for c in measured), default='')
        strategies = len({x.get('strategy') for x in rows})
        pairs = ', '.join(dict.fromkeys(f"{x.get('model')}/{x.get('text')}" for x in rows))
        purpose = (f"{strategies} strategies × {'/'.join(dict.fromkeys(str(x.get('protocol')) for x in rows))} "
                   f"on {pairs}")
    else:
        for p in r.paths:
            if p.suffix == '.json':
                try: d = json.loads(p.read_text(encoding='utf-8'))
                except ValueError: continue
                if not isinstance(d, dict): continue
                purpose = purpose or next((d[k] for k in ('title', 'what', 'purpose') if isinstance(d.get(k), str)), '')
                commit = commit or next((d[k][:7] for k in ('git_commit', 'commit') if isinstance(d.get(k), str)), '')
    if not commit and added: commit = f'{added[0][0]} (added)'
    if not date: date = added[0][1] if added else 'not committed'
    diary = sorted(c for c in r.cited if c.startswith('DIARY.md '))
    if made := [c for c in diary if 'path, written' in r.cited[c]] or diary: # the entry that wrote it, else the first
        purpose = f'{titles.get(made[0], "")} (diary {made[0].split()[1]})' + (f'; {purpose}' if purpose else '')
    elif pages := [c for c in sorted(r.cited) if c.endswith('.ipynb')]:
        purpose = purpose or f'shown in {pages[0]}'
    return date, commit, _one_line(purpose or '–', 220)

def _citers(r:Result) -> str:
    labels = sorted(r.cited)
    diary = list(dict.fromkeys(l.split()[1] for l in labels if l.startswith('DIARY.md ')))
    rest = [l for l in labels if not l.startswith('DIARY.md ')]
    scans = {l for l in rest if any(h.startswith('scan: ') for h in r.cited[l]) and
             all(h.startswith('scan: ') for h in r.cited[l])}
    out = [f'`{l}`' + (' (folder scan)' if l in scans else '') for l in rest]
    if diary: out.append('DIARY ' + ', '.join(diary))
    return ', '.join(out) or '**nothing**'

def collect(root:Path=ROOT) -> list[Result]:
    "Every result under nbs/results, with what cites it."
    found, texts = results(root/'nbs'/'results'), citers(root)
    cite(found, texts)
    scan(found, texts)
    return found

def index_keys(text:str) -> list[str]:
    "The results an index lists: the first cell of each table row, in backticks."
    return re.findall(r'^\| `([^`]+)` \|', text, re.M)

def render(found:list[Result]) -> str:
    firsts, dates = first_commits(), commit_dates()
    diary = ROOT/'DIARY.md'
    titles = diary_titles(diary.read_text(encoding='utf-8')) if diary.is_file() else {}
    lines = ['# Committed results', '',
             'One row per result: a `kvstrat-bench` run folder, or a group of files sharing a stem. Date: the day the '
             'code was measured (its rows\' `git_commit`), else the day the result was first committed; commit: '
             'the code measured (from its rows or metadata), else the commit that added it; purpose: the research '
             'diary entry that cites it, and what its rows or metadata say; cited by: the pages, tests, scripts and '
             'diary entries that name it or load it (a folder scan reads every run it might change).', '',
             'Written by `python research/results_index.py`; `tests/test_results_index.py` fails when a result is '
             'missing here or listed but gone, or when nothing cites it. Regenerate after committing a run.', '']
    by_group = defaultdict(list)
    for r in found: by_group[r.group].append(r)
    for group, rs in by_group.items():
        lines += [f'## {group}/', '', '| result | date | commit | purpose | cited by |', '|---|---|---|---|---|']
        for r in rs:
            date, commit, purpose = describe(r, firsts, dates, titles)
            lines.append(f'| `{r.key}` | {date} | {commit} | {purpose} | {_citers(r)} |')
        lines.append('')
    return '\n'.join(lines)

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--check', action='store_true', help='exit 1 if the index is stale or a result is uncited')
    p.add_argument('--uncited', action='store_true', help='list the results nothing cites, with their sizes')
    a = p.parse_args(argv)
    found = collect()
    uncited = [r for r in found if not r.cited]
    if a.uncited:
        for r in uncited: print(f'{r.size():>10} {r.key}')
        print(f'{len(uncited)} uncited, {sum(r.size() for r in uncited) / 1e6:.1f} MB')
        return 0
    if a.check:
        listed = index_keys(INDEX.read_text(encoding='utf-8')) if INDEX.is_file() else []
        keys = [r.key for r in found]
        bad = ([f'missing from the index: {k}' for k in keys if k not in listed] +
               [f'in the index but gone: {k}' for k in listed if k not in keys] +
               [f'cited nowhere: {r.key}' for r in uncited])
        print('\n'.join(bad) or f'{INDEX.relative_to(ROOT)}: {len(keys)} results, each cited')
        return 1 if bad else 0
    INDEX.write_text(render(found) + '\n', encoding='utf-8')
    print(f'wrote {INDEX.relative_to(ROOT)}: {len(found)} results, {len(uncited)} cited nowhere')
    return 0

if __name__ == '__main__': sys.exit(main())
