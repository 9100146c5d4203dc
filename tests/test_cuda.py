"""Every registered strategy on CUDA in bfloat16: chunked forward, greedy generate and batch expansion on a tiny model,
with every tensor the cache builds on the model's device; and a model split over two GPUs, each cache layer on its
layer's device. Skipped without CUDA (the CPU matrices are test_strategies.py and test_dtypes.py)."""
import pytest, torch
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache
from kvstrat.policy import STRATEGIES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')

@pytest.mark.parametrize('name', sorted(STRATEGIES))
def test_strategy_on_cuda(name):
    model, strategy = tiny_model('gqa', seed=1).to('cuda', torch.bfloat16), STRATEGIES[name].example()
    ids = torch.randint(1, 256, (2, 64), device='cuda')
    cache = CompressedCache(model, strategy)
    with torch.no_grad(), cache.attached(model):
        for i in range(0, 64, 8): logits = model(ids[:, i:i+8], cache=cache, use_cache=True).logits
    assert torch.isfinite(logits).all() and 0 < cache.nbytes()
    cache = CompressedCache(model, strategy)
    with torch.no_grad(), cache.attached(model):
        out = model.generate(ids[:, :40], cache=cache, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0,
                             num_beams=2)
    assert out.shape == (2, 44)

@pytest.mark.skipif(torch.cuda.device_count() < 2, reason='needs two GPUs')
def test_layers_on_two_gpus():
    "Layers placed on cuda:0 and cuda:1 (as `device_map='auto'` does): each cache layer holds its rows on its device."
    from accelerate import dispatch_model
    model = tiny_model('gqa', seed=1)
    model = dispatch_model(model, {'model.embed_tokens': 0, 'model.layers.0': 0, 'model.layers.1': 1, 'model.norm': 1,
                                   'model.rotary_emb': 0, 'lm_head': 1})
    cache = CompressedCache(model, STRATEGIES['kivi'].example())
    with torch.no_grad(), cache.attached(model): model.generate(torch.randint(1, 256, (2, 40), device='cuda:0'), cache=cache,
                                                                max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert [l.store.device for l in cache.layers] == [torch.device('cuda:0'), torch.device('cuda:1')]
