"""`kvstrat-bench` end to end on a tiny random model: argument errors, the row schema, resuming a killed run,
reports and plots, the console entry points, the lock on a results directory, bad lines and Ctrl-C."""
import json, statistics, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest, torch
import kvstrat.bench as bench
from kvstrat.cli import main
from kvstrat.core import tiny_model
from kvstrat.policy import STRATEGIES, make_strategy
from kvstrat.report import write_report
from kvstrat.results import PROTOCOLS, ROW_FIELDS
import kvstrat.cli as cli

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
       (['--time-limit', '-5'], "expected a positive number of seconds, got '-5'"),
       (['--max-rows', '-1'], "argument --max-rows: expected a positive integer, got '-1'"),
       (['--max-rows', '0'], "argument --max-rows: expected a positive integer, got '0'"),
       (['--device', 'foo'], "argument --device: not a torch device: 'foo'"),
       (['--protocol', 'passkey', '--passkey-lengths', '120'], # the prompt alone takes about 200 byte tokens
        'passkey length 120 is too short for the prompt itself: its preamble, needle and question take'),
       (['--text', '/nonexistent/text.txt'], "Unknown text '/nonexistent/text.txt'")]

def exits(argv:list[str], capsys) -> tuple[int, str]:
    "Exit code and stderr of `main(argv)`."
    try: code = main(argv)
    except SystemExit as e: code = e.code
    return code, capsys.readouterr().err

def assert_error(code:int, err:str, message:str):
    "A clear error: exit code 2, one line last, and before it only the bench's one-line warnings; no traceback."
    *notes, last = err.splitlines()
    assert code == 2 and all(n.startswith('kvstrat-bench: warning: ') for n in notes), (code, err)
    assert last.startswith('kvstrat-bench: error: ') and message in last, err

@pytest.mark.parametrize('extra,message', BAD)
def test_bad_arguments(extra, message, text, tmp_path, capsys):
    argv = tiny_args(text, tmp_path/'out', '--strategies', 'int4', *extra) # a later --strategies wins
    assert_error(*exits(argv, capsys), message)
    assert not (tmp_path/'out').exists()

def test_device_cuda_without_cuda(text, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    assert_error(*exits(tiny_args(text, tmp_path/'out', '--strategies', 'int4', '--device', 'cuda'), capsys),
                 "argument --device: 'cuda': no cuda device is available here")

def test_text_not_utf8(tmp_path, capsys):
    latin = tmp_path/'latin1.txt'
    latin.write_bytes(' '.join(f'Phrase {i}, déjà vue.' for i in range(400)).encode('latin1'))
    assert_error(*exits(tiny_args(latin, tmp_path/'out', '--protocol', 'ppl', '--strategies', 'int4'), capsys),
                 f'the text {latin} is not UTF-8 (byte 0xe9 at offset 11): re-encode it as UTF-8, '
                 'e.g. `iconv -f latin1 -t utf-8')

def test_passkey_text_too_short(tmp_path, capsys):
    "Only a text shorter than the prompt's filler is blamed on the text."
    short = tmp_path/'short.txt'
    short.write_text(' '.join(f'Sentence {i}.' for i in range(30)))
    assert_error(*exits(tiny_args(short, tmp_path/'out', '--strategies', 'int4', '--protocol', 'passkey', '--passkey-lengths', '600'), capsys),
                 f'passkey length 600 needs more text: the text has {len(short.read_bytes())} tokens')

def test_model_directory_without_tokenizer(text, tmp_path, capsys):
    model = tmp_path/'model'
    model.mkdir(); (model/'config.json').write_text('{"model_type": "llama"}')
    assert_error(*exits(tiny_args(text, tmp_path/'out', '--strategies', 'int4', '--model', str(model)), capsys),
                 f'model directory {model} has no tokenizer: it holds none of tokenizer.json, tokenizer.model, '
                 'tokenizer_config.json')

def test_report_without_results(tmp_path, capsys):
    assert_error(*exits(['report', str(tmp_path)], capsys), f"no results: {tmp_path/'results.jsonl'} does not exist")
    assert_error(*exits(['report', str(tmp_path/'gone')], capsys), f"no results: {tmp_path/'gone'} does not exist")
    assert not (tmp_path/'gone').exists() and not (tmp_path/'.lock').exists()

def test_report_without_valid_rows(tmp_path, capsys):
    (tmp_path/'results.jsonl').write_text('not a row\n{"strategy": "kiv')
    code, err = exits(['report', str(tmp_path)], capsys)
    assert code == 2 and 'Traceback' not in err
    *warnings, last = err.splitlines()
    assert last == f"kvstrat-bench: error: no results: {tmp_path/'results.jsonl'} holds no valid rows"
    assert [w.split(':')[2] for w in warnings] == [f' skipping line 1 of {tmp_path/"results.jsonl"}',
                                                   f' skipping line 2 of {tmp_path/"results.jsonl"} (cut short']

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

def typed(v, key:str) -> str:
    "A preset's value as typed on the command line (token counts as 1k, 2k, ...)."
    if isinstance(v, list): return ' '.join(typed(x, key) for x in v)
    return f'{v // 1024}k' if key.endswith('_lengths') and v % 1024 == 0 else str(v)

def test_help_shows_the_presets(capsys):
    "Every value of every size, in its option's help and in the sizes section: taken from PRESETS, they cannot drift."
    with pytest.raises(SystemExit): main(['--help'])
    out = capsys.readouterr().out
    sizes = out[out.index('\nsizes '):]
    actions = cli.build_parser()._option_string_actions
    for size, preset in cli.PRESETS.items():
        for key, value in preset.items():
            option = '--' + key.replace('_', '-')
            assert f'{size} {typed(value, key)}' in actions[option].help, (size, option, actions[option].help)
            assert f'{option} {typed(value, key)}' in sizes, (size, option)
    assert '1.5k' not in out

def test_presets_and_long_speed_lengths():
    quick, full = cli.parse_args([]), cli.parse_args(['--size', 'full'])
    assert (quick.passkey_lengths, quick.passkey_trials, quick.threads) == ([1024, 2048], 1, None) # threads: torch's, every core
    assert (full.passkey_lengths, full.passkey_trials, full.speed_repeats) == ([1024, 2048, 4096], 2, 1)
    assert cli.parse_args(['--speed-lengths', '4k', '16k', '32k']).speed_lengths == [4096, 16384, 32768]

def test_strategy_modules_are_imported():
    from kvstrat.policy import strategy_modules
    bench.load_strategies()
    for name in strategy_modules(): assert name in sys.modules, name

# --- the rows -----------------------------------------------------------------------------------------------------

NUMBERS = {'ppl': ['windows', 'tokens_scored', 'ppl', 'delta_ppl', 'delta_ppl_pct', 'delta_nll', 'delta_nll_se'],
           'passkey': ['passkey_acc'],
           'speed': ['prefill_tok_s', 'decode_tok_s', 'speed_ratio', 'peak_rss_mb'],
           'bytes': []} # its compression, at every context, and the bytes held at the end
ROWS = 3 * len(PROTOCOLS) # the `run` fixture's: FullKV, INT4 and KIVI under every protocol

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
        assert r['dtype'] == 'float32' and r['cpu_kernels'] in (True, False)
    kivi = rows[2]
    assert kivi['strategy'] == KIVI and kivi['params']['group'] == 16 and kivi['params']['residual'] == 8
    assert kivi['settings'] == {'windows': 2, 'prefill': 32, 'score': 16, 'chunk': 8}
    assert len(kivi['window_nll']) == 2 and kivi['tokens_scored'] == 2 * 16
    assert set(rows[3]['passkey']) == {'300'} and set(rows[3]['passkey']['300']) == {'0.2', '0.8'}
    assert set(rows[6]['speed']) == {'40', '64'} and rows[6]['speed_ratio'] == 1.0
    for r in rows[6:9]: # each length's FullKV peaks, measured once a run in fresh processes, are beside every row's
        assert {L: x['full_peak_rss_mb_runs'] for L, x in r['speed'].items()} == \
            {L: x['peak_rss_mb_runs'] for L, x in rows[6]['speed'].items()}
        for x in r['speed'].values(): # a peak is the median of one fresh process per repeat
            for who in ('', 'full_'):
                runs, peak = x[f'{who}peak_rss_mb_runs'], x[f'{who}peak_rss_mb']
                assert len(runs) == len(x['decode_tok_s_runs']) and peak == statistics.median(runs)
    assert [r['protocol'] for r in rows[9:]] == ['bytes'] * 3 and rows[9]['compression'] == 0.5 # FullKV's float32
    for r in rows[9:]: assert r['settings'] == {'windows': 1, 'prefill': 32, 'score': 16} # the first window

def test_rows_documented_in_notebook():
    "The notebook's field table and ROW_FIELDS name the same fields, in the same order."
    nb = json.loads((ROOT/'nbs'/'14_results.ipynb').read_text())
    md = next(''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'markdown' and '| field | meaning |' in ''.join(c['source']))
    documented = [l.split('|')[1].strip().strip('`') for l in md.splitlines() if l.startswith('| `')]
    assert documented == list(ROW_FIELDS)

def test_reports_and_plots(run):
    out, rows = run
    md = (out/'results.md').read_text()
    assert '| strategy | PPL | ΔPPL (±se) | ΔPPL % | compression | every context | passkey | decode tok/s ratio |' in md
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
    p = subprocess.Popen([sys.executable, '-m', 'kvstrat.cli', *args], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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

def rows_of(out:Path) -> list[dict]: return [json.loads(l) for l in (out/'results.jsonl').read_text().splitlines()]

def copy_run(run, tmp_path, edit=None) -> Path:
    "A copy of the finished run's directory, each row passed through `edit(row)` if given."
    out = Path(shutil.copytree(run[0], tmp_path/'copy'))
    if edit: (out/'results.jsonl').write_text(''.join(json.dumps(edit(r)) + '\n' for r in rows_of(out)))
    return out

RUN_ARGS = ('--protocol', *PROTOCOLS, '--strategies', 'int4', 'kivi:group=16,residual=8') # the `run` fixture's

def test_resume_key_has_device_dtype_and_kernels(run, text, tmp_path):
    "A row measured on another device, in another dtype or with the kernels set otherwise is measured again."
    other = {'full': dict(device='NVIDIA H200'), 'int4': dict(dtype='bfloat16'), KIVI: dict(cpu_kernels=None)}
    out = copy_run(run, tmp_path, lambda r: {**r, **other[r['strategy']]} if r['protocol'] == 'ppl' else r)
    assert main(tiny_args(text, out, '--protocol', 'ppl', '--strategies', 'int4', 'kivi:group=16,residual=8')) == 0
    rows = rows_of(out)
    assert len(rows) == ROWS + 3 and [r['strategy'] for r in rows[ROWS:]] == ['full', 'int4', KIVI]
    here = (run[1][0]['device'], 'float32', run[1][0]['cpu_kernels'])
    assert [(r['device'], r['dtype'], r['cpu_kernels']) for r in rows[ROWS:]] == [here] * 3
    assert main(tiny_args(text, out, '--protocol', 'ppl', '--strategies', 'int4', 'kivi:group=16,residual=8')) == 0
    assert len(rows_of(out)) == ROWS + 3 # now they are there

def test_rows_of_another_commit_are_reused_with_a_warning(run, text, tmp_path, capsys):
    out = copy_run(run, tmp_path, lambda r: dict(r, git_commit='f' * 40 if r['protocol'] == 'ppl' else 'e' * 40))
    before = (out/'results.jsonl').read_text()
    capsys.readouterr()
    assert main(tiny_args(text, out, *RUN_ARGS)) == 0
    assert (out/'results.jsonl').read_text() == before # nothing measured again
    warnings = [l for l in capsys.readouterr().err.splitlines() if 'warning' in l]
    assert len(warnings) == 1 and f'reusing {ROWS} rows measured at another commit (eeeeeeeeee, ffffffffff)' in warnings[0], warnings

def test_bad_line_does_not_block_resume(run, text, tmp_path, capsys):
    "A row damaged in the middle of the file is set aside and measured again; the others are kept."
    out = copy_run(run, tmp_path)
    lines = (out/'results.jsonl').read_text().splitlines()
    bad = lines[1][:40] # the int4 ppl row, cut
    (out/'results.jsonl').write_text('\n'.join([lines[0], bad, *lines[2:]]) + '\n')
    assert main(tiny_args(text, out, *RUN_ARGS)) == 0
    err = capsys.readouterr().err
    assert f"warning: skipping line 2 of {out/'results.jsonl'}: " in err and 'Traceback' not in err, err
    assert f"kept in {out/'results.rejected.jsonl'}" in err
    assert (out/'results.rejected.jsonl').read_text() == bad + '\n'
    after = (out/'results.jsonl').read_text().splitlines()
    assert after[:-1] == [lines[0], *lines[2:]] and json.loads(after[-1])['strategy'] == 'int4' # measured again, at the end
    assert len({(r['protocol'], r['strategy']) for r in map(json.loads, after)}) == len(after) == ROWS

def test_report_sets_bad_lines_aside(run, tmp_path, capsys):
    "A bad line anywhere and a partial last line: the report skips both and keeps them aside; new rows append cleanly."
    out = copy_run(run, tmp_path)
    lines = (out/'results.jsonl').read_text().splitlines()
    (out/'results.jsonl').write_text('\n'.join([*lines[:3], '{"oops": 1}', *lines[3:]]) + '\n{"strategy": "kiv')
    assert main(['report', str(out)]) == 0
    err = capsys.readouterr().err
    assert f"skipping line 4 of {out/'results.jsonl'}: not a row" in err
    assert f"skipping line {ROWS + 2} of {out/'results.jsonl'} (cut short: no line end)" in err
    assert (out/'results.rejected.jsonl').read_text() == '{"oops": 1}\n{"strategy": "kiv\n'
    assert (out/'results.jsonl').read_text() == '\n'.join(lines) + '\n'
    sections = (out/'results.md').read_text().split('\n## ')[1:] # the table, then its ΔNLL per window
    assert [s.count('| int4 | ') for s in sections] == [1, 1], sections
    bench.Results(out).append(run[1][0])
    assert rows_of(out)[-1] == run[1][0]

LOCKER = """import fcntl, os, sys, time
f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); f.write(f'{os.getpid()}\\n'); f.flush()
print('locked', flush=True); time.sleep(120)"""

def test_second_run_on_one_out_fails_at_once(text, tmp_path, capsys):
    "Another process holds OUT's lock: the run stops at once, naming it; once it is gone, the run goes ahead."
    out = tmp_path/'out'; out.mkdir()
    locker = subprocess.Popen([sys.executable, '-c', LOCKER, str(out/'.lock')], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline() == 'locked\n'
        t0 = time.monotonic()
        assert_error(*exits(tiny_args(text, out, '--protocol', 'ppl', '--strategies', 'int4'), capsys),
                     f'{out} is in use by another kvstrat-bench run (PID {locker.pid}): wait for it to end, '
                     'or use another --out')
        assert time.monotonic() - t0 < 5 and not (out/'results.jsonl').exists()
        code, err = exits(['report', str(out)], capsys) # no results yet, and the lock is not needed to say so
        assert code == 2 and 'no results' in err
    finally: locker.kill(); locker.wait()
    assert main(tiny_args(text, out, '--protocol', 'ppl', '--strategies', 'int4')) == 0
    assert (out/'.lock').read_text() == '' # released at the end of the run
    with bench.OutLock(out): assert (out/'.lock').read_text() == f'{os.getpid()}\n'

def test_lock_is_released_after_an_error(text, tmp_path, capsys):
    out = tmp_path/'out'; out.mkdir() # an existing directory is locked before anything is loaded
    assert_error(*exits(tiny_args(text, out, '--strategies', 'int4', '--windows', '500'), capsys), 'text too short')
    with bench.OutLock(out): pass

def test_ctrl_c_writes_the_report(text, tmp_path, capsys, monkeypatch):
    "Ctrl-C in the middle of a run: one line on how to resume, the report of the finished rows, exit code 130."
    def interrupted(self, strategy): raise KeyboardInterrupt
    monkeypatch.setattr(bench.Bench, 'run_passkey', interrupted)
    out = tmp_path/'out'
    args = tiny_args(text, out, '--protocol', 'ppl', 'passkey', '--strategies', 'int4')
    assert main(args) == 130
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    assert [l for l in err.splitlines() if 'interrupted' in l or 'resume' in l] == \
        [f'kvstrat-bench: interrupted after 2 new rows (Ctrl-C); rerun the same command with the same --out ({out}) '
         'to resume']
    assert [(r['protocol'], r['strategy']) for r in rows_of(out)] == [('ppl', 'full'), ('ppl', 'int4')]
    assert '| int4 | ' in (out/'results.md').read_text() and (out/'pareto.png').exists()
    with bench.OutLock(out): pass # released
    monkeypatch.undo()
    assert main(args) == 0 and len(rows_of(out)) == 4 # resumed

def test_tokenizer_past_the_model_vocabulary(tmp_path, capsys):
    "A tokenizer that is not the model's is refused before any measurement, not an IndexError mid-run."
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(['[UNK]'] + [f'w{i}' for i in range(999)])},
                                    unk_token='[UNK]'))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    model = tmp_path/'model'
    tiny_model('gqa').save_pretrained(model); PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(model)
    words = tmp_path/'words.txt'
    words.write_text(' '.join(f'w{i % 999}' for i in range(3000)))
    capsys.readouterr() # what saving printed
    code, err = exits(tiny_args(words, tmp_path/'out', '--strategies', 'int4', '--model', str(model)), capsys)
    assert code == 2 and 'Traceback' not in err # above the error: transformers' bar as it loads the model
    assert "error: the tokenizer gives token id 999, past the model's vocabulary of 256" in err.splitlines()[-1]

def test_out_is_a_file(text, tmp_path, capsys):
    "Refused before the model or the text loads."
    (out := tmp_path/'afile').write_text('')
    assert_error(*exits(tiny_args(text, out, '--strategies', 'int4'), capsys), f'--out {out} is a file, not a directory')
