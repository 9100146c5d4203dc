"""The research scripts of `research/` against their index, `research/README.md`: every script has a row and every row a
script, the row's diary entry is a heading of DIARY.md and its results exist, each script uses kvstrat's public API
only, and each prints its docstring on `--help` (after its imports: a script that no longer imports fails here).

The `--help` runs share one process that imports torch, transformers and kvstrat once and forks a child per script
(`python tests/test_research.py SCRIPT...`): about 15 s for all of them, where a fresh interpreter each takes ~2 min."""
import ast, json, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESEARCH, INDEX = ROOT/'research', ROOT/'research'/'README.md'
ROW = re.compile(r'^\| `([^`]+)` \| (.+?) \| (.+?) \| (.+?) \|$') # | `script` | purpose | diary entry | results |

def index() -> dict[str, tuple[str, str, str]]: # script -> (purpose, diary entry, results)
    return {m[1]: m.groups()[1:] for line in INDEX.read_text().splitlines() if (m := ROW.match(line))}

def scripts() -> list[str]: return sorted(p.name for p in RESEARCH.iterdir() if p.suffix in ('.py', '.sh'))

NAMES = sorted(set(index()) | set(scripts())) # a script without a row, or a row without a script, fails below

@pytest.mark.parametrize('name', NAMES)
def test_indexed(name):
    assert name in index(), f'research/{name} has no row in research/README.md'
    assert (RESEARCH/name).is_file(), f'research/README.md lists {name}, which is not in research/'

def test_index_entries():
    headings = {l[3:] for l in (ROOT/'DIARY.md').read_text().splitlines() if l.startswith('## ')}
    for name, (purpose, entry, results) in index().items():
        assert entry == '—' or entry in headings, f'{name}: no DIARY.md entry is headed {entry!r}'
        for path in re.findall(r'`([^`]+)`', results):
            assert list((ROOT/'nbs'/'results').glob(path.rstrip('/'))), f'{name}: no nbs/results/{path}'

def private_uses(source:str) -> list[str]:
    "kvstrat's private names in a script: imported (`from kvstrat.x import _y`) or read from a kvstrat module (`Q._y`)."
    trees = [ast.parse(source)]
    for s in list(ast.walk(trees[0])): # and the snippets the commit comparisons run in fresh processes
        if isinstance(s, ast.Constant) and re.search(r'^(from|import) kvstrat', str(s.value), re.M):
            try: trees.append(ast.parse(s.value))
            except SyntaxError: pass # prose
    found = []
    for tree in trees:
        modules = set() # names bound to kvstrat modules
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split('.')[0] for a in node.names if a.name.split('.')[0] == 'kvstrat'}
            elif isinstance(node, ast.ImportFrom) and (node.module or '').split('.')[0] == 'kvstrat':
                found += [f'from {node.module} import {a.name}' for a in node.names if a.name.startswith('_')]
                if node.module == 'kvstrat': modules |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith('_') and not node.attr.startswith('__'):
                base = node.value
                while isinstance(base, ast.Attribute): base = base.value
                if isinstance(base, ast.Name) and base.id in modules: found.append(ast.unparse(node))
    return found

def test_private_uses_found():
    assert private_uses('import kvstrat.quant as Q\nfrom kvstrat.sensitivity import _kl, held_exact\nQ._grouped(x)\n'
                        'CHILD = """from kvstrat import bench\nbench._one_run_peak_mb()"""') == [
        'from kvstrat.sensitivity import _kl', 'Q._grouped', 'bench._one_run_peak_mb']
    assert private_uses('import kvstrat, torch\nkvstrat.__file__; torch._C; model.config._attn_implementation') == []

@pytest.mark.parametrize('name', [n for n in scripts() if n.endswith('.py')])
def test_public_api_only(name):
    used = private_uses((RESEARCH/name).read_text())
    assert not used, f'{name} uses private names of kvstrat: {used}'

@pytest.fixture(scope='module')
def helps() -> dict[str, tuple[int, str]]: # script -> (exit status, output) of its `--help`
    py = [n for n in index() if n.endswith('.py') and (RESEARCH/n).is_file()]
    out = subprocess.run([sys.executable, __file__, *py], capture_output=True, text=True, cwd=ROOT, timeout=600,
                         env=os.environ | dict(PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout)
    for n in index():
        if n.endswith('.sh') and (RESEARCH/n).is_file():
            r = subprocess.run(['bash', RESEARCH/n, '--help'], capture_output=True, text=True, cwd=ROOT, timeout=60)
            found[n] = (r.returncode, r.stdout + r.stderr)
    return found

def first_line(name:str) -> str:
    "A script's docstring's first line, or a shell script's first comment line: what its `--help` must print."
    text = (RESEARCH/name).read_text()
    if name.endswith('.py'): return ast.get_docstring(ast.parse(text)).splitlines()[0]
    return next(l[2:] for l in text.splitlines()[1:] if l.startswith('# '))

@pytest.mark.parametrize('name', sorted(index()))
def test_help(name, helps):
    assert name in helps, f'{name}: no such script'
    status, out = helps[name]
    assert status == 0, f'{name} --help exited {status}:\n{out[-3000:]}'
    assert ' '.join(first_line(name).split()) in ' '.join(out.split()), f'{name} --help printed:\n{out[-3000:]}'

def run_helps(paths:list[Path]) -> dict[str, tuple[int, str]]:
    "Each script's `--help` as `python SCRIPT --help` runs it, in a child forked from this process: its status, output."
    import runpy, signal, traceback
    import torch, transformers, kvstrat, kvstrat.bench, kvstrat.cli, kvstrat.measure # noqa: F401 (imported once, here)
    found = {}
    for path in paths:
        r, w = os.pipe()
        if (pid := os.fork()) == 0: # the child: a script run as `__main__`, its directory first on sys.path
            os.close(r); os.dup2(w, 1); os.dup2(w, 2); signal.alarm(60)
            sys.argv, sys.path[0], status = [str(path), '--help'], str(path.parent), 0
            try: runpy.run_path(str(path), run_name='__main__')
            except SystemExit as e:
                if isinstance(e.code, str): print(e.code, file=sys.stderr)
                status = e.code if isinstance(e.code, int) else int(e.code is not None)
            except BaseException: traceback.print_exc(); status = 1
            sys.stdout.flush(); sys.stderr.flush(); os._exit(status)
        os.close(w)
        with os.fdopen(r, errors='replace') as f: out = f.read()
        _, wait = os.waitpid(pid, 0)
        found[path.name] = (os.waitstatus_to_exitcode(wait), out)
    return found

if __name__ == '__main__': # the `helps` fixture's process
    print(json.dumps(run_helps([RESEARCH/n for n in sys.argv[1:]])))
