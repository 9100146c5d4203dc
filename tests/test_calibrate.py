"""`kvstrat-calibrate` end to end on a tiny random model with its own tokenizer: a pooled measurement is the one
`pool_sensitivities` makes of the parts measured alone, and `--pool-with auto` says when nothing ships."""
import pytest, torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from kvstrat.core import tiny_model
from kvstrat.sensitivity import load_sensitivity, pool_sensitivities
from kvstrat.measure import main, calibrate as calibrate_from
from kvstrat.core import load_model
from kvstrat.stratigraphic import Stratigraphic
from kvstrat.adapter import ModelSpec

WORDS = [f'w{i}' for i in range(255)] # with [UNK], the tiny model's vocabulary of 256

@pytest.fixture(scope='module')
def tiny_dir(tmp_path_factory):
    "A tiny GQA model (2 layers, 2 KV heads, head_dim 32) saved with a word-level tokenizer of its vocabulary."
    d = tmp_path_factory.mktemp('tiny')
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(['[UNK]'] + WORDS)}, unk_token='[UNK]'))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    torch.manual_seed(0)
    tiny_model('gqa').save_pretrained(d/'model')
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(d/'model')
    for name, step in (('a', 7), ('b', 11)): # two texts, each 3,000 words long
        (d/f'{name}.txt').write_text(' '.join(WORDS[(i * step) % 255] for i in range(3000)))
    return d

def calibrate(d, text:str, out:str, *more) -> int:
    return main(['--model', str(d/'model'), '--texts', str(d/text), '--windows', '2', '--length', '64', '--repeat', '16',
                 '--evict-length', '128', '--threads', '1', '--out', str(d/out), *more])

def test_pool_with_equals_pooling_the_parts(tiny_dir):
    d = tiny_dir
    assert calibrate(d, 'a.txt', 'a.json') == 0 and calibrate(d, 'b.txt', 'b.json') == 0
    assert calibrate(d, 'b.txt', 'pooled.json', '--pool-with', f"{d/'a.json'}=6") == 0
    a, b, pooled = (load_sensitivity(d/f) for f in ('a.json', 'b.json', 'pooled.json'))
    assert not torch.allclose(a.cost, b.cost) # the two texts measure differently
    want = pool_sensitivities([(b, 2), (a, 6)]) # this run's 2 windows, then the file's 6
    torch.testing.assert_close(pooled.cost, want.cost); torch.testing.assert_close(pooled.evict, want.evict)
    assert pooled.source == want.source and '(2 of 8 windows)' in pooled.source and '(6 of 8 windows)' in pooled.source

def test_pool_with_a_calibration_measured_otherwise(tiny_dir, capsys):
    d = tiny_dir
    assert calibrate(d, 'a.txt', 'no-evict.json', '--window', 'none') == 0
    capsys.readouterr()
    assert calibrate(d, 'b.txt', 'x.json', '--pool-with', f"{d/'no-evict.json'}=2") == 2 # refused before it measures
    assert 'was measured with a different window, evict than this run' in capsys.readouterr().err
    assert not (d/'x.json').exists()

def test_ratio_measures_what_its_plan_reads(tiny_dir):
    ("`--ratio 8` measures eviction beyond the 128-token window and widths with the 4 residual rows its plan keeps; "
     "`--ratio 6.75`, its 143-token window keeping the newest 96 and the most attended, dropping 16 at once.")
    d = tiny_dir
    assert calibrate(d, 'a.txt', 'r8.json', '--ratio', '8', '--evict-length', '288', '--repeat', '16') == 0
    s, plan = load_sensitivity(d/'r8.json'), Stratigraphic(ratio=8)
    assert (s.window, s.residual) == (plan.settings.window, plan.settings.residual) == (128, 4)
    assert calibrate(d, 'a.txt', 'r8-12.json', '--ratio', '8', '--residual', '12', '--window', 'none') == 0
    s = load_sensitivity(d/'r8-12.json')
    assert (s.window, s.residual, s.evict) == (None, 12, None) # given, they win
    assert calibrate(d, 'a.txt', 'r6.json', '--ratio', '6.75', '--evict-length', '288', '--repeat', '16') == 0
    s, plan = load_sensitivity(d/'r6.json'), Stratigraphic(ratio=6.75) # its window ranks rows, dropping 16 at once
    assert (s.window, s.recent, s.drop_group) == (plan.settings.window, plan.settings.recent, plan.settings.drop_group) == (143, 96, 16)

def test_pool_with_auto_where_nothing_ships(tiny_dir, capsys):
    assert calibrate(tiny_dir, 'a.txt', 'x.json', '--pool-with', 'auto=4') == 2
    err = capsys.readouterr().err
    assert "--pool-with auto: no calibration ships for this model's shape ('llama', 2, 2, 32)" in err
    assert 'Traceback' not in err

def test_a_model_without_tokenizer(tmp_path, capsys):
    "A `shape:` model has random weights and no tokenizer: refused before any measurement, in one line."
    assert main(['--model', 'shape:smollm2-135m', '--out', str(tmp_path/'x.json')]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("kvstrat-calibrate: error: --model shape:smollm2-135m has no tokenizer, and calibration reads "
                       "text: give a hub id, a local directory with one, or an alias")

def test_a_stopped_run_resumes(tiny_dir, monkeypatch, capsys):
    "Stopped after its first layer, a run leaves it in OUT.partial; run again, it measures the rest and writes OUT whole."
    import kvstrat.measure as measure
    d = tiny_dir
    assert calibrate(d, 'a.txt', 'whole.json') == 0
    measured = measure.eviction_costs
    calls = []
    def stop_at_the_second(*args, **kwargs): # the second layer's eviction never finishes
        calls.append(1)
        if len(calls) == 2: raise KeyboardInterrupt
        return measured(*args, **kwargs)
    monkeypatch.setattr(measure, 'eviction_costs', stop_at_the_second)
    with pytest.raises(KeyboardInterrupt): calibrate(d, 'a.txt', 'resumed.json')
    assert (d/'resumed.json.partial').is_file() and not (d/'resumed.json').exists()
    monkeypatch.setattr(measure, 'eviction_costs', measured)
    capsys.readouterr()
    assert calibrate(d, 'a.txt', 'resumed.json') == 0
    err = capsys.readouterr().err
    assert f"resuming from {d/'resumed.json.partial'}: 1 of 2 layers measured" in err and '2/2' not in err.split('\n')[0]
    assert not (d/'resumed.json.partial').exists() # done: the partial file goes
    whole, resumed = load_sensitivity(d/'whole.json'), load_sensitivity(d/'resumed.json')
    torch.testing.assert_close(resumed.cost, whole.cost); torch.testing.assert_close(resumed.evict, whole.evict)
    assert calibrate(d, 'a.txt', 'other.json', '--window', '8') == 0 # measured otherwise: a partial of another run
    assert 'TFLOP' in capsys.readouterr().err # the progress bar, with its units of work

def test_token_keys(tiny_dir):
    "`--keys token` measures keys grouped along head_dim: `stratigraphic:keys=token` plans on that file, the default refuses it."
    d = tiny_dir
    assert calibrate(d, 'a.txt', 'tokens.json', '--keys', 'token', '--window', 'none') == 0
    assert calibrate(d, 'a.txt', 'channels.json', '--window', 'none') == 0
    tokens, channels = load_sensitivity(d/'tokens.json'), load_sensitivity(d/'channels.json')
    assert (tokens.family.key_axis, channels.family.key_axis) == ('token', 'channel')
    assert not torch.allclose(tokens.cost[:, :, 0], channels.cost[:, :, 0]) # keys measured otherwise
    model = tiny_model('gqa')
    Stratigraphic(ratio=3, keys='token', window=None, calibration=str(d/'tokens.json')).sensitivity(ModelSpec.of(model))
    with pytest.raises(ValueError, match='was measured for'):
        Stratigraphic(ratio=3, window=None, calibration=str(d/'tokens.json')).sensitivity(ModelSpec.of(model))

def test_calibrate_from_python_is_the_command(tiny_dir):
    "`kvstrat.calibrate` on a loaded model measures what `kvstrat-calibrate` writes, at the defaults and at ratio 6.75."
    d = tiny_dir
    model, tok = load_model(str(d/'model'))
    for ratio, more in ((4.0, ()), (6.75, ('--ratio', '6.75'))):
        assert calibrate(d, 'a.txt', 'cli.json', '--evict-length', '288', *more) == 0
        cli = load_sensitivity(d/'cli.json')
        s = calibrate_from(model, tok, ratio=ratio, texts=[str(d/'a.txt')], windows=2, length=64, repeat=16,
                           evict_length=288, name=str(d/'model'))
        torch.testing.assert_close(s.cost, cli.cost, rtol=0, atol=0); torch.testing.assert_close(s.evict, cli.evict)
        assert (s.source, s.window, s.recent, s.drop_group, s.residual) == (
            cli.source, cli.window, cli.recent, cli.drop_group, cli.residual)
