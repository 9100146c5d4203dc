"Randomised checks of `kvstrat.quant`, larger than the notebook's: the error bound, the reference, packing."
import math
import torch
from hypothesis import given, settings, strategies as st
from conftest import examples
from kvstrat.quant import AXES, SCALE_BITS, SUPPORTED_BITS, QTensor, pack_bits, quantize, quantize_reference, unpack_bits

torch.set_num_threads(1)

def _keys(seed:int, shape:tuple, peak:float, offset:float) -> torch.Tensor:
    "Normal data with two 30x outlier channels and a per-channel offset, like LLM keys, scaled to max |x| == peak."
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) + offset * torch.randn(shape[-1], generator=gen)
    x[..., torch.randint(0, shape[-1], (2,), generator=gen)] *= 30
    return x * (peak / x.abs().max())

def _bound(q:QTensor, x:torch.Tensor) -> torch.Tensor: # the bound documented in nbs/02_quant.ipynb
    return q.per_element(q.scale) / 2 * (1 + 2**-12) + 2**-23 * x.abs()

@settings(max_examples=examples(200), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), T=st.integers(1, 130), bits=st.sampled_from(SUPPORTED_BITS),
       axis=st.sampled_from(AXES), group=st.sampled_from([1, 3, 8, 32, 64]), n_groups=st.integers(1, 3),
       log_peak=st.floats(-5, 4.5), offset=st.sampled_from([0.0, 1.0, 300.0]))
def test_error_bound(seed, T, bits, axis, group, n_groups, log_peak, offset):
    D = group * n_groups if axis == 'token' else 1 + seed % 80
    x = _keys(seed, (2, T, D), 10**log_peak, offset)
    q = quantize(x, bits, group, axis)
    assert ((q.dequantize() - x).abs() <= _bound(q, x)).all()

@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), T=st.integers(1, 20), bits=st.sampled_from(SUPPORTED_BITS),
       axis=st.sampled_from(AXES), group=st.sampled_from([1, 2, 5, 8]), offset=st.sampled_from([0.0, 50.0]),
       scale_bits=st.sampled_from(SCALE_BITS))
def test_matches_reference(seed, T, bits, axis, group, offset, scale_bits):
    x = _keys(seed, (2, T, 2 * group), 1.0, offset)
    q = quantize(x, bits, group, axis, scale_bits=scale_bits)
    codes, scale, zero = quantize_reference(x, bits, group, axis, scale_bits)
    assert torch.equal(q.codes(), codes) and torch.equal(q.scale, scale) and torch.equal(q.zero, zero)

@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), bits=st.sampled_from(SUPPORTED_BITS), n=st.integers(0, 200),
       lead=st.lists(st.integers(1, 3), max_size=3))
def test_pack_round_trip(seed, bits, n, lead):
    codes = torch.randint(0, 2**bits, (*lead, n), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    packed = pack_bits(codes, bits)
    assert packed.shape == (*lead, math.ceil(n * bits / 8))
    assert torch.equal(unpack_bits(packed, bits, n), codes)
