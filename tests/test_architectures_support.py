"""Gemma 3, Gemma 2, Phi-3 and Qwen2.5 through the model adapter: their geometry, the attention keywords kvstrat
honours (scaling, sliding_window, softcap, dropout) or refuses, their LoRA targets, and the architectures it refuses.
(The shared matrix in tests/test_strategies.py runs every strategy on their tiny models.)"""
import types
from functools import partial
import pytest, torch
from transformers import DynamicCache, Gemma3Config, GPT2Config, GPT2LMHeadModel
from kvstrat.adapter import LORA_TARGETS, ModelSpec, lora_targets
from kvstrat.cache import CompressedCache, CompressedLayer, kvstrat_attention
from kvstrat.core import tiny_model

NEW = ('gemma3', 'gemma3-1b', 'gemma2', 'phi3', 'qwen2.5')

def _logits(model, cache, ids, chunk):
    with cache.attached(model), torch.no_grad():
        return torch.cat([model(ids[:, i:i+chunk], cache=cache, use_cache=True).logits
                          for i in range(0, ids.shape[1], chunk)], 1)

@pytest.mark.parametrize('layout,model_type,kv,sliding,window,softcap', [
    ('gemma3', 'gemma3_text', 2, (True, False, True, False), 8, None),
    ('gemma3-1b', 'gemma3_text', 1, (True, False, True, False), 8, None),
    ('gemma2', 'gemma2', 2, (True, False, True, False), 8, 50.0),
    ('phi3', 'phi3', 2, (True,) * 4, 48, None), # Phi-3-mini as released: a window on every layer
    ('mistral', 'mistral', 2, (True,) * 4, 44, None),
    ('gemma3-5to1', 'gemma3_text', 1, (True,) * 5 + (False,), 8, None),
    ('qwen2.5', 'qwen2', 2, (False,) * 4, None, None)])
def test_spec(layout, model_type, kv, sliding, window, softcap):
    spec = ModelSpec.of(tiny_model(layout, n_layers=len(sliding)))
    assert (spec.model_type, spec.n_kv_heads, spec.head_dim) == (model_type, kv, 32)
    assert (spec.sliding, spec.sliding_window, spec.softcap) == (sliding, window, softcap)

def test_gemma3_multimodal_config_reads_its_decoder():
    text = tiny_model('gemma3').config
    assert ModelSpec.of(Gemma3Config(text_config=text)) == ModelSpec.of(text)

def test_unwired_architecture_is_refused():
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(NotImplementedError, match="'gpt2' is not supported"): CompressedCache(gpt2, 'int8')
    with pytest.raises(NotImplementedError, match='bidirectionally'):
        ModelSpec.of(tiny_model('gemma3').config.__class__(use_bidirectional_attention=True))

@pytest.mark.parametrize('layout', NEW)
def test_full_is_dynamic_cache_bit_for_bit_chunked(layout):
    "Chunks of FullKV through the compressed cache give DynamicCache's logits exactly (sliding windows included)."
    model, ids = tiny_model(layout, seed=1), torch.randint(1, 256, (2, 27))
    with torch.no_grad():
        ref = torch.cat([model(ids[:, i:i+5], cache=c, use_cache=True).logits
                         for c in [DynamicCache(config=model.config)] for i in range(0, 27, 5)], 1)
    assert torch.equal(_logits(model, CompressedCache(model, 'full'), ids, 5), ref)

def _capped_gemma2(softcap):
    "Tiny Gemma 2 with queries large enough for the attention-logit cap to change the output."
    model = tiny_model('gemma2', seed=1)
    model.config.attn_logit_softcapping = softcap
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = softcap
        layer.self_attn.q_proj.weight.data *= 40
    return model

@pytest.mark.parametrize('strategy', ['full', 'int8', 'kivi'])
def test_softcap_is_honoured(strategy):
    model, ids = _capped_gemma2(2.0), torch.randint(1, 256, (1, 40))
    with torch.no_grad(): plain = model(ids, use_cache=False).logits
    uncapped = _capped_gemma2(None)
    with torch.no_grad(): uncapped = uncapped(ids, use_cache=False).logits
    first = _logits(model, CompressedCache(model, strategy), ids[:, :16], 16) # compressed after it attends
    torch.testing.assert_close(first, plain[:, :16], atol=1e-3, rtol=1e-3) # tier 0 rounds to fp16
    assert (first - uncapped[:, :16]).abs().max() > 0.1 # the cap bites: without it the logits are far off
    tiered, dense = (_logits(model, CompressedCache(model, strategy, tiered=t), ids, 1) for t in (True, False))
    torch.testing.assert_close(tiered, dense, atol=1e-4, rtol=1e-4)
    if strategy == 'full': torch.testing.assert_close(tiered, plain, atol=1e-5, rtol=1e-5)

def test_triton_never_reads_a_softcapped_layer():
    model = tiny_model('gemma2')
    cache = CompressedCache(model, 'int8')
    layer = next(l for l in cache.layers if isinstance(l, CompressedLayer))
    cuda_query = types.SimpleNamespace(is_cuda=True, shape=(1, 4, 1, 32)) # what reads_with_triton looks at
    assert not layer.reads_with_triton(cuda_query, None, softcap=50.0)

def _attend(model, cache, **kw):
    attn = model.model.layers[1].self_attn # a compressed (global) layer
    q, k = torch.randn(1, 4, 3, 32), torch.randn(1, 2, 3, 32)
    with cache.attached(model):
        if not cache.layers[1].is_initialized: model(torch.randint(1, 256, (1, 4)), cache=cache, use_cache=True)
        return kvstrat_attention(cache, attn, q, k, k, None, scaling=0.2, **kw)

def test_unknown_math_keywords_are_refused():
    model = tiny_model('gemma3'); cache = CompressedCache(model, 'int8')
    out, _ = _attend(model, cache, position_ids=torch.arange(3)[None], use_cache=True, is_causal=True)
    assert out.shape == (1, 3, 4, 32)
    with pytest.raises(NotImplementedError, match=r"\['s_aux'\]"): _attend(model, cache, s_aux=torch.zeros(4))
    with pytest.raises(NotImplementedError, match='bidirectionally'): _attend(model, cache, is_causal=False)
    with pytest.raises(ValueError, match='sliding window 4'): _attend(model, cache, sliding_window=4)

def test_dropout_is_refused_on_a_compressed_layer():
    model, ids = tiny_model('qwen2.5'), torch.randint(1, 256, (1, 8))
    for layer in model.model.layers: layer.self_attn.attention_dropout = 0.1
    cache = CompressedCache(model.train(), 'int8')
    with cache.attached(model), pytest.raises(ValueError, match='dropout 0.1'): model(ids, cache=cache, use_cache=True)
    model.eval()
    with cache.attached(model): model(ids, cache=cache, use_cache=True) # 0 at eval

@pytest.mark.parametrize('layout', NEW)
def test_lora_targets(layout):
    model = tiny_model(layout)
    targets = lora_targets(model)
    assert targets == (('qkv_proj', 'o_proj') if layout == 'phi3' else LORA_TARGETS)
    names = {n.rsplit('.', 1)[-1] for n, _ in model.named_modules()}
    assert set(targets) <= names
