"""Streaming heads on an accelerator: flash-linear-attention's kernel against the torch path, and the cache on CUDA
against the teacher-forced hybrid model. Skipped without CUDA and the [fla] extra; CPU paths are tested in
nbs/07_streaming.ipynb."""
import math, sys, pytest, torch
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache
from kvstrat.streaming import (decayed_chunked, decayed_fla, decayed_attention, fla_available, feature, Streaming,
                               hybrid_override)

needs_fla = pytest.mark.skipif(not (torch.cuda.is_available() and fla_available('cuda')),
                               reason='needs CUDA and flash-linear-attention (pip install kvstrat[fla])')

def _inputs(T, device, B=2, H=4, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device)
    fq, fk = feature(r(B, H, T, D)), feature(r(B, H, T, D))
    v = torch.cat([r(B, H, T, D), torch.ones(B, H, T, 1, device=device)], -1) # values with the normaliser column
    log_lam = torch.tensor([0.9, 0.99, 0.5, 0.999], device=device).log()
    return fq, fk, v, log_lam, r(B, H, D, D + 1)

def test_cpu_never_imports_fla():
    fq, fk, v, ll, S0 = _inputs(20, 'cpu')
    o, S = decayed_attention(fq, fk, v, ll, S0)
    torch.testing.assert_close(o, decayed_chunked(fq, fk, v, ll, S0)[0])
    assert not fla_available('cpu') and 'fla' not in sys.modules

@needs_fla
@pytest.mark.parametrize('T', [16, 100, 1024])
def test_fla_matches_chunked_torch(T):
    fq, fk, v, ll, S0 = _inputs(T, 'cuda')
    o_fla, S_fla = decayed_fla(fq, fk, v, ll, S0)
    o_ref, S_ref = decayed_chunked(fq.double(), fk.double(), v.double(), ll.double(), S0.double())
    scale = o_ref.abs().mean().item()
    assert (o_fla.double() - o_ref).abs().max().item() < 2e-2 * scale, 'outputs differ'
    assert (S_fla.double() - S_ref).abs().max().item() < 2e-2 * S_ref.abs().mean().item(), 'final states differ'

@needs_fla
def test_streaming_cache_on_cuda_matches_teacher_forced():
    model = tiny_model('gqa', seed=0, head_dim=64).cuda()
    ids = torch.randint(1, 256, (2, 96), device='cuda')
    st = Streaming(fraction=0.5, pattern='index', window=16, calibration='none', lam=0.95)
    cache = CompressedCache(model, st)
    with torch.no_grad(), cache.attached(model):
        got = [model(ids[:, :64], cache=cache, use_cache=True).logits] # the prefill's state part runs on fla
        got += [model(ids[:, i:i+1], cache=cache, use_cache=True).logits for i in range(64, 96)]
    with torch.no_grad(), hybrid_override(model, st.mask, st.params): want = model(ids).logits
    torch.testing.assert_close(torch.cat(got, 1), want, atol=2e-3, rtol=2e-3)
