"Randomised checks of `kvstrat.kernels` against torch: quantisation bit for bit, and the three reads."
import pytest, torch
from hypothesis import given, settings, strategies as st
from conftest import examples
from kvstrat import kernels
from kvstrat.quant import quantize, scale_values, unpack_bits
from test_quant import _keys

torch.set_num_threads(1)
pytestmark = pytest.mark.skipif(not kernels.kernels_available(), reason="the CPU kernels need a C compiler and AVX2")

@settings(max_examples=examples(300), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), D=st.sampled_from([16, 32, 64, 128]),
       bits=st.sampled_from(kernels.KERNEL_BITS), n_groups=st.sampled_from([1, 2]), symmetric=st.booleans(),
       log_peak=st.floats(-6, 4.5), offset=st.sampled_from([0.0, 1.0, 300.0]))
def test_quantize_rows_bit_for_bit(seed, n, D, bits, n_groups, symmetric, log_peak, offset):
    x = _keys(seed, (n, D), 10**log_peak, offset)
    ref, (packed, scale, zero) = quantize(x, bits, D // n_groups, 'token', symmetric), kernels.quantize_rows(x, bits, D // n_groups, symmetric)
    assert torch.equal(packed, ref.packed) and torch.equal(scale.view(torch.int16), ref.scale.view(torch.int16))
    assert zero is None if symmetric else torch.equal(zero.view(torch.int16), ref.zero.view(torch.int16))

def _dense(codes, scale, offset, J): # (N, D) codes, (N, J) scale and offset -> (N, D) rows
    return (codes.float().unflatten(-1, (J, -1)) * scale[..., None] + offset[..., None]).flatten(-2)

@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), BH=st.integers(1, 4), M=st.integers(1, 8), n=st.integers(1, 70),
       D=st.sampled_from([16, 32, 64, 128]), bits=st.sampled_from(kernels.KERNEL_BITS), n_groups=st.sampled_from([1, 2]),
       symmetric=st.booleans())
def test_token_reads_match_torch(seed, BH, M, n, D, bits, n_groups, symmetric):
    gen = torch.Generator().manual_seed(seed)
    q = quantize(_keys(seed, (BH * n, D), 4.0, 1.0), bits, D // n_groups, 'token', symmetric)
    s = scale_values(q.scale)
    offset = -2.0 ** (bits - 1) * s if symmetric else q.zero.float()
    rows = _dense(unpack_bits(q.packed, bits, D), s, offset, n_groups).view(BH, n, D)
    query, p = torch.randn(BH, M, D, generator=gen), torch.randn(BH, M, n, generator=gen).softmax(-1)
    z = None if symmetric else q.zero.float()
    torch.testing.assert_close(kernels.token_scores(query, q.packed, s, z, bits), query @ rows.transpose(1, 2), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(kernels.token_values(p, q.packed, s, z, bits, D), p @ rows, rtol=1e-4, atol=1e-5)

@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), BH=st.integers(1, 4), M=st.integers(1, 8), groups=st.integers(1, 4),
       r=st.sampled_from([1, 5, 8, 32]), D=st.sampled_from([16, 64]), bits=st.sampled_from(kernels.KERNEL_BITS))
def test_channel_scores_match_torch(seed, BH, M, groups, r, D, bits):
    x = _keys(seed, (BH, groups * r, D), 4.0, 1.0)
    q = quantize(x, bits, r, 'channel')
    query = torch.randn(BH, M, D, generator=torch.Generator().manual_seed(seed))
    got = kernels.channel_scores(query, q.packed.view(BH * groups * r, -1), scale_values(q.scale).view(-1, D),
                                 q.zero.float().view(-1, D), bits, r)
    torch.testing.assert_close(got, query @ q.dequantize().float().transpose(1, 2), rtol=1e-4, atol=1e-4)
