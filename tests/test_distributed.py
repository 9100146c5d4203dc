"""`kvstrat-bench --workers N` on a local Ray of two CPU workers and a tiny random model: the rows a serial run
writes, a worker killed in the middle of a unit, a killed driver resumed, and one line where Ray is not installed."""
import json, os, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path
from types import SimpleNamespace
import numpy as np
import pytest, torch
from kvstrat.cli import main
from kvstrat.distributed import DIE_ONCE, RAY_EXTRA
from kvstrat.results import row_key

ENV_FIELDS = {'kvstrat_version', 'git_commit', 'device', 'dtype', 'torch_version', 'transformers_version',
              'cpu_kernels'}
NOT_FIGURES = ENV_FIELDS | {'seconds'} # what may differ between a serial and a distributed run of the same rows

@pytest.fixture(scope='module', autouse=True)
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before) # `--threads 1` set it for this process

@pytest.fixture(scope='module')
def text(tmp_path_factory) -> Path:
    "About 6 KB of repeated English sentences, as UTF-8."
    p = tmp_path_factory.mktemp('text')/'text.txt'
    p.write_text(' '.join(f'The {w} sat by the river and watched the boats go by.' for w in
                          ['cat', 'old man', 'girl', 'heron', 'dog', 'café owner'] * 18), encoding='utf-8')
    return p

def tiny_args(text:Path, out:Path, *extra) -> list[str]:
    return ['--model', 'tiny:gqa', '--text', str(text), '--out', str(out), '--strategies', 'full', 'int4', 'kivi',
            '--protocol', 'ppl', 'passkey', '--windows', '2', '--prefill', '16', '--score', '8',
            '--passkey-lengths', '300', '--passkey-depths', '0.5', '--passkey-trials', '2', *extra]

def rows_of(out:Path) -> list[dict]: return [json.loads(l) for l in (out/'results.jsonl').read_text().splitlines()]

def figures(out:Path) -> dict:
    "Each row's fields but its timings and environment, by (protocol, strategy)."
    return {(r['protocol'], r['strategy']): {k: v for k, v in r.items() if k not in NOT_FIGURES} for r in rows_of(out)}

def assert_same_figures(a:dict, b:dict):
    """`figures` of two runs agree: the same rows and fields, floats (and lists of them) to float32 rounding, the rest
    exactly. On some CPUs a matmul's last bit depends on the batch, and a unit holds fewer windows than a serial batch."""
    assert sorted(a) == sorted(b)
    num = lambda v: isinstance(v, float) or (isinstance(v, list) and bool(v) and all(isinstance(x, float) for x in v))
    for key in a:
        assert sorted(a[key]) == sorted(b[key]), key
        for k, v in a[key].items():
            if num(v) and num(b[key][k]): assert np.allclose(v, b[key][k], rtol=1e-5, atol=1e-3), (key, k, v, b[key][k])
            else: assert v == b[key][k], (key, k, v, b[key][k])

@pytest.fixture(scope='module')
def serial(text, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('serial')
    assert main(tiny_args(text, out, '--threads', '1')) == 0
    assert len(rows_of(out)) == 6
    return out

@pytest.fixture(scope='module')
def cluster(tmp_path_factory) -> SimpleNamespace:
    "A local Ray of two CPUs for the module (runs in this process use it): its address, and the `DIE_ONCE` marker."
    ray = pytest.importorskip('ray', reason=f'Ray is not installed: {RAY_EXTRA}')
    marker = tmp_path_factory.mktemp('die')/'die-once'
    os.environ[DIE_ONCE] = str(marker) # the workers inherit it; a unit dies only once the test creates the file
    tmp = tempfile.mkdtemp(prefix='ray', dir='/tmp') # short: Ray's socket paths must fit 107 characters
    ray.init(address='local', num_cpus=2, include_dashboard=False, _temp_dir=tmp, logging_level='WARNING')
    yield SimpleNamespace(marker=marker, address=ray.get_runtime_context().gcs_address)
    ray.shutdown()
    os.environ.pop(DIE_ONCE, None)
    shutil.rmtree(tmp, ignore_errors=True)

def test_without_ray_one_line(text, tmp_path, capsys, monkeypatch):
    "Where Ray is not installed, --workers and --ray end in one line naming the extra that installs it."
    monkeypatch.setitem(sys.modules, 'ray', None) # what `import ray` sees without Ray
    for option in (['--workers', '2'], ['--ray', 'auto']):
        assert main(tiny_args(text, tmp_path/'out', *option)) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and f"need Ray, which is not installed: {RAY_EXTRA}" in err, err
    assert not (tmp_path/'out').exists()

def test_two_workers_equal_serial(cluster, serial, text, tmp_path):
    "Every figure of every row, computed as units on two workers, equals the serial run's; so does every resume key."
    out = tmp_path/'two'
    assert main(tiny_args(text, out, '--workers', '2')) == 0
    assert_same_figures(figures(out), figures(serial))
    assert sorted(map(row_key, rows_of(out))) == sorted(map(row_key, rows_of(serial)))
    assert len(rows_of(out)) == 6 and main(tiny_args(text, out, '--workers', '2')) == 0 and len(rows_of(out)) == 6

def test_worker_killed_mid_unit_is_retried(cluster, serial, text, tmp_path):
    "The first unit kills its own worker process; Ray runs it again on another, and the rows are the same."
    cluster.marker.touch()
    assert main(tiny_args(text, tmp_path, '--workers', '2')) == 0
    assert not cluster.marker.exists(), 'no unit died'
    assert_same_figures(figures(tmp_path), figures(serial))

def test_killed_driver_resumes(cluster, text, tmp_path):
    "Kill a driver (on the module's Ray, through --ray) once a row is written; the rerun adds the missing rows."
    out, path = tmp_path/'run', tmp_path/'run'/'results.jsonl'
    args = tiny_args(text, out, '--passkey-lengths', '1000', '--passkey-depths', '0.2', '0.8', '--passkey-trials', '3')
    p = subprocess.Popen([sys.executable, '-m', 'kvstrat.cli', *args, '--ray', cluster.address],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None and not (path.exists() and path.read_text().count('\n')):
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    before = path.read_text().splitlines()
    assert 1 <= len(before) < 6, 'the driver must be killed part-way'
    assert main(args + ['--workers', '2']) == 0
    after = path.read_text().splitlines()
    assert after[:len(before)] == before
    keys = [row_key(r) for r in map(json.loads, after)]
    assert len(keys) == len(set(keys)) == 6
