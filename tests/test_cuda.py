"""Every registered strategy on CUDA: chunked forward, greedy generate and batch expansion on a tiny model, with
every tensor the cache builds on the model's device. Skipped without CUDA (the CPU matrix is test_strategies.py)."""
import pytest, torch
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache
from kvstrat.policy import STRATEGIES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')

@pytest.mark.parametrize('name', sorted(STRATEGIES))
def test_strategy_on_cuda(name):
    model, strategy = tiny_model('gqa', seed=1).cuda(), STRATEGIES[name].example()
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
