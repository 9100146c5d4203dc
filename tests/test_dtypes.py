"""Every registered strategy on tiny models in bfloat16 and float16 on CPU (the dtypes a GPU runs): chunked forwards,
greedy generate, a batch of 2 with padding, 2 beams, and crop, with finite logits in the model's dtype. (Bytes are checked by
the float32 matrix in test_strategies.py.)"""
import pytest, torch
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache
from kvstrat.policy import STRATEGIES

DTYPES = (torch.bfloat16, torch.float16)
CASES = [(name, dtype) for name in sorted(STRATEGIES) for dtype in DTYPES]

def _model(dtype): return tiny_model('gqa', seed=1).to(dtype)

@pytest.mark.parametrize('name,dtype', CASES)
def test_chunks_generate_padding_crop(name, dtype):
    model, strategy = _model(dtype), STRATEGIES[name].example()
    ids = torch.randint(1, 256, (2, 40))
    mask = torch.ones_like(ids); mask[1, :5] = 0; ids[1, :5] = 0 # left padding of the second row
    cache = CompressedCache(model, strategy)
    with torch.no_grad(), cache.attached(model):
        for i in range(0, 32, 8): logits = model(ids[:1, i:i+8], cache=cache, use_cache=True).logits
        assert logits.dtype == dtype and torch.isfinite(logits).all()
        cache.crop(-4)
        assert cache.get_seq_length() == 28 and torch.isfinite(model(ids[:1, 28:30], cache=cache, use_cache=True).logits).all()
    batch = CompressedCache(model, strategy)
    with torch.no_grad(), batch.attached(model):
        out = model.generate(ids, attention_mask=mask, cache=batch, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    assert out.sequences.shape == (2, 44) and torch.isfinite(torch.stack(out.logits)).all()
    beams = CompressedCache(model, strategy)
    with torch.no_grad(), beams.attached(model):
        out = model.generate(ids[:1], cache=beams, max_new_tokens=4, min_new_tokens=4, do_sample=False, num_beams=2,
                             pad_token_id=0)
    assert out.shape == (1, 44)
    assert all(t.dtype in (dtype, torch.float16, torch.uint8, torch.int32, torch.float32) for l in cache.layers
               if getattr(l, 'store', None) for tier in l.store.tiers for t in tier.tensors())

def test_each_layer_stores_on_its_own_device():
    "A cache layer is created on the device of the keys its layer hands it (what a model split over GPUs relies on)."
    model = tiny_model('gqa', seed=1)
    cache = CompressedCache(model, STRATEGIES['kivi'].example())
    with torch.no_grad(), cache.attached(model): model(torch.randint(1, 256, (1, 24)), cache=cache, use_cache=True)
    layers = model.get_decoder().layers
    assert [l.store.device for l in cache.layers] == [next(layers[i].parameters()).device for i in range(len(layers))]
