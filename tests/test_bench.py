"""`kvstrat-bench` end to end on a tiny random model: argument errors, the row schema, resuming a killed run,
reports and plots, and the console entry points."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
import kvstrat.bench as bench
from kvstrat.bench import PROTOCOLS, ROW_FIELDS, STRATEGIES, main, make_strategy, write_report

KIVI = make_strategy('kivi:group=16,residual=8').label

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, 'OMP_NUM_THREADS': '1'} # subprocesses on a shared 2-core machine

@pytest.fixture(scope='module', autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

@pytest.fixture(scope='module')
def text(tmp_path_factory):
    p = tmp_path_factory.mktemp('text')/'text.txt'
    p.write_text(' '.join(f'Sentence {i} has a few words.' for i in range(400)))
    return p

def tiny_args(text, out, *extra):
    return ['--model', 'tiny:gqa', '--text', str(text), '--out', str(out), '--threads', '1', '--windows', '2',
            '--prefill', '32', '--score', '16', '--chunk', '8', '--passkey-lengths', '300', '--passkey-depths', '0.2', '0.8',
            '--passkey-trials', '1', '--speed-lengths', '40', '64', '--speed-decode', '3', '--speed-repeats', '1', *extra]

@pytest.fixture(scope='module')
def run(text, tmp_path_factory):
    "A finished run of every protocol with FullKV (added), INT4 and a small KIVI."
    out = tmp_path_factory.mktemp('run')
    assert main(tiny_args(text, out, '--protocol', *PROTOCOLS, '--strategies', 'int4', 'kivi:group=16,residual=8')) == 0
    return out, [json.loads(l) for l in (out/'results.jsonl').read_text().splitlines()]

# --- errors: one line on stderr, exit code 2, nothing written -----------------------------------------------------

BAD = [(['--strategies', 'nope'], "unknown strategy 'nope'"),
       (['--strategies', 'kivi:bitz=2'], "bad parameter 'bitz=2'"),
       (['--strategies', 'kivi:bits=two'], "cannot read 'two'"),
       (['--strategies', 'kivi:bits=5'], 'kivi bits must be 2, 3 or 4'), # the strategy's own check, on this model
       (['--strategies', 'kivi:value_group=5'], 'must divide head_dim 32'),
       (['--windows', '500'], 'text too short'),
       (['--protocol', 'passkey', '--passkey-lengths', '200k'], 'needs more'),
       (['--protocol', 'speed', '--speed-lengths', '200k'], 'text too short'),
       (['--protocol', 'mmlu'], "invalid choice: 'mmlu'"),
       (['--windows', '0'], "expected a positive integer, got '0'"),
       (['--passkey-lengths', 'lots'], "expected a token count such as 2048 or 2k, got 'lots'"),
       (['--passkey-depths', '1.5'], 'a depth is a fraction in [0, 1]'),
       (['--model', 'tiny:nope'], 'layout must be one of'),
       (['--model', 'shape:smollm2-135m'], 'ppl and passkey on a random model would be meaningless: use --protocol speed'),
       (['--text', 'random', '--protocol', 'ppl'], 'ppl on random text would be meaningless'),
       (['--model', 'shape:smollm2-135m', '--protocol', 'speed'], 'has no tokenizer: use --text random'),
       (['--model', 'shape:nope', '--text', 'random', '--protocol', 'speed'], "unknown model shape 'nope'"),
       (['--time-limit', '0'], "expected a positive number of seconds, got '0'"),
       (['--text', '/nonexistent/text.txt'], "Unknown text '/nonexistent/text.txt'")]

@pytest.mark.parametrize('extra,message', BAD)
def test_bad_arguments(extra, message, text, tmp_path, capsys):
    try: code = main(tiny_args(text, tmp_path/'out', '--strategies', 'int4', *extra)) # a later --strategies wins
    except SystemExit as e: code = e.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count('\n') == 1 and err.startswith('kvstrat-bench: error: ') and message in err, err
    assert not (tmp_path/'out').exists()

def test_report_without_results(tmp_path, capsys):
    assert main(['report', str(tmp_path)]) == 2
    assert 'no results' in capsys.readouterr().err

def test_console_script_error_has_no_traceback(text, tmp_path):
    exe = Path(sys.executable).parent/'kvstrat-bench'
    if not exe.exists(): pytest.skip('kvstrat-bench is not installed in this environment')
    p = subprocess.run([str(exe), *tiny_args(text, tmp_path/'out', '--strategies', 'h2o:budget=wide')],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2 and 'Traceback' not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and 'kvstrat-bench: error:' in p.stderr

def test_help_lists_every_strategy(capsys):
    with pytest.raises(SystemExit) as e: main(['--help'])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for name, cls in STRATEGIES.items():
        assert f'\n  {name} ' in out, name
        for f in bench.fields(cls): assert f'{f.name}={f.default}' in out, (name, f.name)
    assert '--passkey-lengths 1k 2k 4k' in out # the full-size options are documented
    for option in ('--time-limit', '--keep-going', 'shape:llama-3.2-1b', "'random'"): assert option in out, option

def test_presets_and_long_speed_lengths():
    quick, full = bench.parse_args([]), bench.parse_args(['--size', 'full'])
    assert (quick.passkey_lengths, quick.passkey_trials, quick.threads) == ([1024, 2048], 1, None) # threads: torch's, every core
    assert (full.passkey_lengths, full.passkey_trials, full.speed_repeats) == ([1024, 2048, 4096], 2, 1)
    assert bench.parse_args(['--speed-lengths', '4k', '16k', '32k']).speed_lengths == [4096, 16384, 32768]

def test_strategy_modules_are_imported():
    for name in bench.STRATEGY_MODULES:
        assert (bench.importlib.util.find_spec(name) is None) == (name not in sys.modules), name

# --- the rows -----------------------------------------------------------------------------------------------------

NUMBERS = {'ppl': ['windows', 'tokens_scored', 'ppl', 'delta_ppl', 'delta_ppl_pct', 'delta_nll', 'delta_nll_se'],
           'passkey': ['passkey_acc'],
           'speed': ['prefill_tok_s', 'decode_tok_s', 'speed_ratio', 'peak_rss_mb']}

def test_row_schema(run):
    _, rows = run
    assert [(r['protocol'], r['strategy']) for r in rows] == \
        [(p, s) for p in PROTOCOLS for s in ('full', 'int4', KIVI)]
    for r in rows:
        assert list(r) == list(ROW_FIELDS)
        for f in ('compression', 'cache_bytes', 'fp16_bytes', 'seconds'): assert isinstance(r[f], (int, float)) and r[f] > 0, f
        for p, names in NUMBERS.items(): # a protocol's figures are filled, the others' are null
            for f in names: assert (r[f] is not None) == (r['protocol'] == p), (r['protocol'], f)
        assert isinstance(r['params'], dict) and isinstance(r['settings'], dict)
        assert (r['window_nll'] is not None) == (r['protocol'] == 'ppl')
        assert (r['passkey'] is not None) == (r['protocol'] == 'passkey')
        assert (r['speed'] is not None) == (r['protocol'] == 'speed')
        assert r['model'] == 'tiny:gqa' and r['text'].endswith('text.txt')
        for f in ('kvstrat_version', 'device', 'torch_version', 'transformers_version'): assert isinstance(r[f], str), f
    kivi = rows[2]
    assert kivi['strategy'] == KIVI and kivi['params']['group'] == 16 and kivi['params']['residual'] == 8
    assert kivi['settings'] == {'windows': 2, 'prefill': 32, 'score': 16, 'chunk': 8}
    assert len(kivi['window_nll']) == 2 and kivi['tokens_scored'] == 2 * 16
    assert set(rows[3]['passkey']) == {'300'} and set(rows[3]['passkey']['300']) == {'0.2', '0.8'}
    assert set(rows[6]['speed']) == {'40', '64'} and rows[6]['speed_ratio'] == 1.0

def test_rows_documented_in_notebook():
    "The notebook's field table and ROW_FIELDS name the same fields, in the same order."
    nb = json.loads((ROOT/'nbs'/'09_bench.ipynb').read_text())
    md = next(''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'markdown' and '| field | meaning |' in ''.join(c['source']))
    documented = [l.split('|')[1].strip().strip('`') for l in md.splitlines() if l.startswith('| `')]
    assert documented == list(ROW_FIELDS)

def test_reports_and_plots(run):
    out, rows = run
    md = (out/'results.md').read_text()
    assert '| strategy | PPL | ΔPPL (±se) | ΔPPL % | compression | passkey | decode tok/s ratio |' in md
    for label in ('full', 'int4', 'kivi:group=16,residual=8'): assert f'| {label} | ' in md
    for f in ('pareto.png', 'headline.png'):
        b = (out/f).read_bytes()
        assert b[:8] == b'\x89PNG\r\n\x1a\n' and len(b) > 10_000, f
        (out/f).unlink()
    assert write_report(out) == md.rstrip('\n') or write_report(out).startswith('# kvstrat-bench results')
    assert (out/'pareto.png').exists() and (out/'headline.png').exists()

def test_speed_on_a_shape_model(tmp_path):
    "The GPU speed run's command on a small shape, on the CPU: random weights, random tokens, speed rows only."
    args = ['--model', 'shape:smollm2-135m', '--text', 'random', '--protocol', 'speed', '--device', 'cpu', '--threads', '1',
            '--strategies', 'h2o', '--speed-lengths', '96', '160', '--speed-decode', '2', '--speed-repeats', '1', '--out', str(tmp_path)]
    assert main(args) == 0
    rows = [json.loads(l) for l in (tmp_path/'results.jsonl').read_text().splitlines()]
    assert [r['strategy'].split(':')[0] for r in rows] == ['full', 'h2o']
    for r in rows:
        assert (r['model'], r['text'], r['protocol'], r['ppl'], r['passkey_acc']) == ('shape:smollm2-135m', 'random (seed 0)', 'speed', None, None)
        assert set(r['speed']) == {'96', '160'} and r['peak_rss_mb'] > 500 and r['decode_tok_s'] > 0
    assert rows[1]['compression'] > 1.5 # H2O keeps half the tokens

def test_freed_memory_is_reused():
    "In the main thread, as the bench runs, freed blocks are reused without page faults until they are released."
    faults = lambda: bench.resource.getrusage(bench.resource.RUSAGE_SELF).ru_minflt
    def fresh_faults():
        before = faults(); x = torch.ones(2**25)
        return faults() - before
    assert bench.reuse_freed_memory()
    x, y = torch.ones(2**25), torch.ones(2**25); del x, y
    assert fresh_faults() < 1000
    bench.release_freed_memory()
    assert fresh_faults() > 30_000

# --- resuming -----------------------------------------------------------------------------------------------------

def test_resume_after_kill(text, tmp_path):
    "Kill a run once its first row is written; the rerun adds the missing rows, none lost or repeated."
    out = tmp_path/'run'
    args = tiny_args(text, out, '--protocol', 'ppl', 'speed', '--strategies', 'int4', 'int8', 'kivi:group=16,residual=8',
                     '--speed-lengths', '1024', '2048', '--speed-repeats', '2')
    p = subprocess.Popen([sys.executable, '-m', 'kvstrat.bench', *args], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path, deadline = out/'results.jsonl', time.time() + 240
    while time.time() < deadline and p.poll() is None and not (path.exists() and path.read_text().count('\n') >= 1):
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    before = path.read_text().splitlines()
    assert 1 <= len(before) < 8, 'the run must be killed part-way'
    assert main(args) == 0
    after = path.read_text().splitlines()
    assert after[:len(before)] == before
    keys = [(r['protocol'], r['strategy']) for r in map(json.loads, after)]
    assert len(keys) == len(set(keys)) == 8
    assert main(args) == 0 and path.read_text().splitlines() == after # a finished run adds nothing

def test_batch_does_not_change_figures(run, text, tmp_path):
    "Windows one at a time or all in one forward pass: the same per-window NLL."
    _, rows = run
    assert main(tiny_args(text, tmp_path, '--protocol', 'ppl', '--strategies', 'kivi:group=16,residual=8', '--batch', '1')) == 0
    one = [json.loads(l) for l in (tmp_path/'results.jsonl').read_text().splitlines()]
    for a, b in zip(rows[:3:2], one): # full and kivi
        assert a['strategy'] == b['strategy']
        torch.testing.assert_close(torch.tensor(a['window_nll']), torch.tensor(b['window_nll']), atol=1e-4, rtol=1e-4)
