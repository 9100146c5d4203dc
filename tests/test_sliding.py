"""Sliding-window layers are compressed layers: they forget what their window no longer sees, hold at most
`window - 1` tokens as transformers' own layer does, read with the window in the mask, and a compressing strategy that
leaves a layer exact says so, once. (The shared matrix, tests/test_strategies.py, runs every strategy on the tiny
models with windows: Gemma 3 alternating and 5:1, Gemma 2, Phi-3 and Mistral with a window on every layer, a window
shorter than a key group.)"""
from dataclasses import dataclass
from typing import ClassVar
import warnings
import pytest, torch
from transformers import DynamicCache
from kvstrat.core import tiny_model
from kvstrat.adapter import ModelSpec
from kvstrat.cache import CompressedCache, CompressedLayer, prefill_cache
from kvstrat.policy import Needs, Strategy

SLIDING = ('sliding', 'gemma3', 'gemma3-1b', 'gemma3-5to1', 'gemma2', 'phi3', 'mistral', 'small-window')

@dataclass
class Exact(Strategy):
    "Test-only: every row stays in tier 0, in the model's dtype: the compressed layer's machinery, nothing compressed."
    name: ClassVar[str] = 'test-exact'
    def needs(self): return Needs(fp_dtype=None)

@dataclass
class KeepsLayerZero(Exact):
    "Test-only: leaves layer 0 exact, for a reason it gives."
    name: ClassVar[str] = 'test-keeps-layer-zero'
    def keeps_exact(self, layer_idx, derived): return 'a test keeps it' if layer_idx == 0 else None

def _generate(model, cache, ids, **kw):
    with cache.attached(model) if isinstance(cache, CompressedCache) else torch.no_grad():
        return model.generate(ids, cache=cache, max_new_tokens=8, do_sample=False, pad_token_id=0, output_logits=True,
                              return_dict_in_generate=True, **kw)

@pytest.mark.parametrize('layout', SLIDING)
def test_a_compressed_sliding_layer_attends_as_transformers_does(layout):
    "Stored exactly, a compressed sliding layer gives transformers' own sliding layer's logits, to float rounding."
    model = tiny_model(layout, seed=1)
    ids = torch.randint(1, 256, (2, 70), generator=torch.Generator().manual_seed(0)) # past every window
    mask = torch.ones_like(ids); mask[1, :6] = 0; ids[1, :6] = 0 # a left-padded row
    ref = _generate(model, DynamicCache(config=model.config), ids, attention_mask=mask)
    out = _generate(model, cache := CompressedCache(model, Exact()), ids, attention_mask=mask)
    assert torch.equal(out.sequences, ref.sequences)
    torch.testing.assert_close(torch.stack(out.logits), torch.stack(ref.logits), atol=2e-5, rtol=2e-5)
    spec = ModelSpec.of(model)
    for layer, sliding in zip(cache.layers, spec.sliding): # a sliding layer holds the newest window - 1 tokens
        assert isinstance(layer, CompressedLayer)
        assert layer.kept().max() == (spec.sliding_window - 1 if sliding else ids.shape[1] + 7)
    chunked = CompressedCache(model, Exact()) # chunks longer than the window read with it in their mask
    with chunked.attached(model), torch.no_grad():
        logits = torch.cat([model(ids[:1, i:i + 20], cache=chunked, use_cache=True).logits for i in range(0, 70, 20)], 1)
    torch.testing.assert_close(logits, model(ids[:1], use_cache=False).logits, atol=2e-5, rtol=2e-5)

@pytest.mark.parametrize('layout', SLIDING)
def test_sliding_layers_count_what_transformers_holds(layout):
    "An fp16 sliding layer holds `window - 1` tokens: the bytes a compressed one is measured against."
    model, ids = tiny_model(layout, seed=1), torch.randint(1, 256, (1, 70))
    full, exact = CompressedCache(model, 'full'), CompressedCache(model, Exact())
    for c in (full, exact):
        with c.attached(model), torch.no_grad(): prefill_cache(model, c, ids, chunk=16)
    assert exact.fp16_nbytes() == full.fp16_nbytes() == full.nbytes() // 2 # FullKV: the fp32 model's rows
    assert exact.nbytes() == full.nbytes() + sum(l.nbytes() - 2 * l.store.B * l.store.H * l.kept().max().item() * l.store.D * 4
                                                for l in exact.layers) # the same rows, and their bookkeeping

def test_a_layer_left_exact_is_named_once():
    model = tiny_model('gemma3', seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        cache = CompressedCache(model, KeepsLayerZero())
    said = [str(w.message) for w in caught if 'exact' in str(w.message)]
    assert said == ["kvstrat: test-keeps-layer-zero leaves 1 of 2 layers exact, stored as FullKV stores them: layers 0: "
                    "a test keeps it"]
    assert not isinstance(cache.layers[0], CompressedLayer) and isinstance(cache.layers[1], CompressedLayer)
    with cache.attached(model), torch.no_grad(): model(torch.randint(1, 256, (1, 20)), cache=cache, use_cache=True)
    parts = cache.nbytes_by_part()
    assert parts['exact (layers 0)', 'keys'] == cache.layers[0].keys.nbytes and sum(parts.values()) == cache.nbytes()
