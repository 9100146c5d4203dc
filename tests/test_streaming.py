"""Streaming heads on an accelerator: flash-linear-attention's kernel against the torch path, and the cache on CUDA
against the teacher-forced hybrid model. Skipped without CUDA and the [fla] extra; CPU paths are tested in
nbs/11a_linear_attention.ipynb and nbs/12_streaming.ipynb."""
import math, sys, pytest, torch
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache
from kvstrat.linear_attention import (decayed_chunked, decayed_fla, decayed_attention, fla_available, feature,
                                      hybrid_override)
from kvstrat.streaming import Streaming

needs_fla = pytest.mark.skipif(not (torch.cuda.is_available() and fla_available('cuda')),
                               reason='needs CUDA and flash-linear-attention (pip install kvstrat[fla])')

def _inputs(T, device, B=2, H=4, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(device)
    fq, fk = feature(r(B, H, T, D)), feature(r(B, H, T, D))
    v = torch.cat([r(B, H, T, D), torch.ones(B, H, T, 1, device=device)], -1) # values with the normaliser column
    log_lam = torch.tensor([0.9, 0.99, 0.5, 0.999], device=device).log()
    return fq, fk, v, log_lam, r(B, H, D, D + 1)

def test_cpu_never_uses_fla(monkeypatch):
    import kvstrat.linear_attention as ks
    def refuse(*a, **kw): raise AssertionError('the fla kernel was called for CPU tensors')
    monkeypatch.setattr(ks, 'decayed_fla', refuse)
    fq, fk, v, ll, S0 = _inputs(20, 'cpu')
    o, S = decayed_attention(fq, fk, v, ll, S0)
    torch.testing.assert_close(o, decayed_chunked(fq, fk, v, ll, S0)[0])
    assert not fla_available('cpu')

@needs_fla
@pytest.mark.parametrize('T', [16, 100, 1024])
def test_fla_matches_chunked_torch(T):
    fq, fk, v, ll, S0 = _inputs(T, 'cuda')
    o_fla, S_fla = decayed_fla(fq, fk, v, ll, S0)
    o_ref, S_ref = decayed_chunked(fq.double(), fk.double(), v.double(), ll.double(), S0.double())
    rel = lambda a, b: ((a.double() - b).norm() / b.norm()).item() # relative error over the whole tensor
    err_o, err_S = rel(o_fla, o_ref), rel(S_fla, S_ref)
    first_bad = ((o_fla.double() - o_ref).abs().amax((0, 1, 3)) > 1e-2 * o_ref.abs().amax()).nonzero()
    assert err_o < 1e-2 and err_S < 1e-2, f'relative error: outputs {err_o:.2e}, final state {err_S:.2e}; first bad step {first_bad[:1].tolist()}'

def _cache_vs_teacher(model, ids):
    "Relative error between the streaming cache path (prefill + decode) and the teacher-forced hybrid model."
    st = Streaming(fraction=0.5, pattern='index', window=16, calibration='none', lam=0.95)
    cache = CompressedCache(model, st)
    with torch.no_grad(), cache.attached(model):
        got = [model(ids[:, :64], cache=cache, use_cache=True).logits] # the prefill's state part is chunked
        got += [model(ids[:, i:i+1], cache=cache, use_cache=True).logits for i in range(64, 96)]
    with torch.no_grad(), hybrid_override(model, cache.derived.mask, cache.derived.params): want = model(ids).logits
    got = torch.cat(got, 1)
    return ((got - want).norm() / want.norm()).item()

@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_streaming_cache_on_cuda_torch_path(monkeypatch):
    import kvstrat.linear_attention as ks
    monkeypatch.setattr(ks, 'fla_available', lambda device: False) # the pure-torch path, on CUDA tensors
    model = tiny_model('gqa', seed=0, head_dim=64).cuda()
    err = _cache_vs_teacher(model, torch.randint(1, 256, (2, 96), device='cuda'))
    assert err < 1e-4, f'relative error {err:.2e}'

@needs_fla
def test_streaming_cache_on_cuda_with_fla():
    model = tiny_model('gqa', seed=0, head_dim=64).cuda()
    err = _cache_vs_teacher(model, torch.randint(1, 256, (2, 96), device='cuda'))
    assert err < 1e-2, f'relative error {err:.2e} (fla computes in tf32)'
