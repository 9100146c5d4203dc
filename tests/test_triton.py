"""The Triton read (`kvstrat.triton_attention.triton_read`) and its attention probabilities against the reference and
CPU reads, over a randomised matrix of tier formats: INT8/4/3/2, keys and values of different widths, per-token and
per-channel keys (whole and partial groups), symmetric, 8-bit scales, rotation, low-rank, fp16/bf16/fp32 rows, two and
three tiers, ragged heads, GQA groups, one query and a chunk. Without CUDA the kernels run under Triton's CPU
interpreter; without triton the module is skipped."""
import os, random, types
import pytest, torch
if not torch.cuda.is_available(): os.environ.setdefault('TRITON_INTERPRET', '1') # before triton is first imported
pytest.importorskip('triton', reason="the Triton read needs triton: pip install 'kvstrat[triton]'")
from kvstrat.formats import FP16, TierSpec
from kvstrat.store import LayerStore
from kvstrat.attention import equal_heads, reference_read, tiered_read
from kvstrat.triton_attention import _tier_args, triton_available, triton_read, triton_unavailable_reason

pytestmark = pytest.mark.skipif(not triton_available(), reason=str(triton_unavailable_reason()))
DEVICE = 'cpu' if os.environ.get('TRITON_INTERPRET') == '1' or not torch.cuda.is_available() else 'cuda'

def make_store(specs, B=2, H=2, D=16, T=24, seed=0, evict=(), ordered=False, dtype=torch.float32):
    "`T` random tokens per head, the oldest 1/len(specs) in the last tier, ...; rows `evict` of tier 0 evicted first."
    torch.manual_seed(seed)
    s = LayerStore(specs, B, H, D, dtype, torch.device(DEVICE), ordered=ordered, keep_score=False)
    s.write(torch.randn(B, H, T, D, device=DEVICE).to(dtype), torch.randn(B, H, T, D, device=DEVICE).to(dtype))
    target = len(specs) - 1 - s.positions()[0] * len(specs) // T
    target[list(evict)] = len(specs)
    s.move(target)
    return s

def check(store, Hq, q, seed=0, scaling=0.25, **kw):
    "triton_read, and its probabilities, against reference_read and the CPU tiered_read (ragged heads too), `q` queries."
    torch.manual_seed(seed + 1)
    query, qpos = torch.randn(store.B, Hq, q, store.D, device=DEVICE), torch.arange(store.seen - q, store.seen)
    out, probs = triton_read(query, store, qpos.to(DEVICE), scaling, want_probs=True, **kw)
    assert out.shape == (store.B, q, Hq, store.D) and out.dtype == query.dtype
    ref = reference_read(query.cpu(), store, qpos, None, scaling) if DEVICE == 'cpu' else None
    if ref is not None: torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    tiered_out, tiered_probs = tiered_read(query, store, qpos.to(DEVICE), scaling, want_probs=True)
    torch.testing.assert_close(out, tiered_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(probs, tiered_probs, rtol=1e-4, atol=1e-5)
    return out

def random_spec(rng, bits, layout, D):
    "A spec of `bits` and `layout` with random groups, scale width and rotation."
    divisors = [g for g in (4, 8, 16, 32) if D % g == 0]
    key_group = rng.choice([3, 4, 5, 8]) if layout == 'channel' else rng.choice(divisors)
    return TierSpec(bits, 'channel' if layout == 'channel' else 'token', key_group, rng.choice(divisors),
                    symmetric=layout == 'token-sym', rotate=rng.random() < 0.5, scale_bits=rng.choice([16, 8]))

@pytest.mark.parametrize('layout', ['token', 'token-sym', 'channel'])
@pytest.mark.parametrize('bits', [8, 4, 3, 2])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_two_tiers_random(bits, layout, seed):
    "fp16 + one quantised tier, random groups/scales/rotation/shape, ragged heads; q = 1 and a chunk of 3."
    rng = random.Random(f'{bits}{layout}{seed}')
    D, B, g = rng.choice([16, 32]), rng.choice([1, 2]), rng.choice([1, 2])
    spec, T = random_spec(rng, bits, layout, D), rng.randint(14, 40)
    evict = rng.sample(range(T), rng.randint(0, 3)) # tokens of head 0 (batch 0)
    store = make_store((FP16, spec), B=B, D=D, T=T, seed=seed, evict=evict)
    for q in (1, 3): check(store, 2 * g, q, seed)

@pytest.mark.parametrize('specs', [
    (FP16, TierSpec(8, 'token', 16, 16), TierSpec(2, 'channel', 4, 16)),
    (FP16, TierSpec(4, 'token', 8, 16, symmetric=True, scale_bits=8), TierSpec(3, 'token', 16, 8, rotate=True)),
    (TierSpec(fp_dtype=torch.float32), TierSpec(4, 'channel', 4, 8, rotate=True, scale_bits=8), TierSpec(rank=3)),
], ids=['int8-int2ch', 'int4sym-int3rot', 'fp32-int4ch-lowrank'])
@pytest.mark.parametrize('ragged', [False, True])
def test_three_tiers(specs, ragged):
    "Three tiers, the fp one included, with equal heads or ragged ones."
    store = make_store(specs, T=24, evict=(1, 5, 17) if ragged else (), ordered=not ragged)
    assert equal_heads(store) != ragged
    for q in (1, 3): check(store, 4, q)

@pytest.mark.parametrize('kbits,vbits', [(4, 2), (3, 8), (2, 4), (8, 3)])
@pytest.mark.parametrize('layout', ['token', 'token-sym', 'channel'])
@pytest.mark.parametrize('rotate', [False, True])
def test_key_and_value_widths(kbits, vbits, layout, rotate):
    "Keys and values of one tier at different widths (KBITS, VBITS), 8-bit scales, ragged heads; q = 1 and a chunk."
    spec = TierSpec(kbits, 'channel' if layout == 'channel' else 'token', 4 if layout == 'channel' else 8, 16,
                    symmetric=layout == 'token-sym', rotate=rotate, scale_bits=8, value_bits=vbits)
    store = make_store((FP16, spec), T=24, evict=(2, 9))
    flags = _tier_args(store.tiers[1])[1]
    assert (flags['KBITS'], flags['VBITS']) == (kbits, vbits)
    assert store.tiers[1].v.data.shape[1] == 16 * vbits // 8 # values packed at their own width
    for q in (1, 3): check(store, 4, q)

@pytest.mark.parametrize('evict,partial', [((), False), ((0, 1, 2, 3), False), ((2,), True), ((4, 30), True)])
def test_channel_groups(evict, partial):
    "Per-channel keys in whole groups (no row map) and partial ones (an int32 row -> group map), ragged or not."
    store = make_store((FP16, TierSpec(4, 'channel', 4, 16, scale_bits=8)), T=32, evict=evict)
    assert _tier_args(store.tiers[1])[1]['GROUP_MAP'] == partial
    for q in (1, 3): check(store, 4, q)

def test_head_without_rows():
    "A head that holds no row of a tier (its older tokens all evicted) and one that holds only the deeper tier."
    store = make_store((FP16, TierSpec(2, 'token', 16, 16)), T=16, evict=range(8))
    assert store.tiers[1].counts[0] == 0
    for q in (1, 3): check(store, 4, q)

@pytest.mark.parametrize('g,q,block_n', [(1, 1, 16), (4, 20, 32), (2, 3, 64)])
def test_blocks(g, q, block_n):
    "Several row blocks per head, and several query blocks per KV head (g·q = 80 > 64)."
    store = make_store((FP16, TierSpec(4, 'token', 16, 16)), B=1, T=90, evict=(7, 50))
    check(store, 2 * g, q, block_n=block_n)

@pytest.mark.parametrize('tier_dtype', [torch.float16, torch.bfloat16, None])
@pytest.mark.parametrize('query_dtype', [torch.float32, torch.float16])
def test_dtypes(tier_dtype, query_dtype):
    "fp16, bf16 and the model's own dtype (fp32) in tier 0; the output comes back in the query's dtype."
    store = make_store((TierSpec(fp_dtype=tier_dtype), TierSpec(8, 'token', 16, 16)), T=20, evict=(2,))
    query, qpos = torch.randn(2, 4, 3, 16, device=DEVICE), torch.arange(17, 20, device=DEVICE)
    out, _ = triton_read(query.to(query_dtype), store, qpos, 0.25)
    assert out.dtype == query_dtype
    ref, _ = triton_read(query, store, qpos, 0.25)
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=2e-3 if query_dtype == torch.float16 else 0)
    if DEVICE == 'cpu':
        torch.testing.assert_close(ref, reference_read(query, store, qpos, None, 0.25), rtol=1e-4, atol=1e-4)

def test_strided_query():
    "A transposed (non-contiguous) query view, as attention modules produce, is read through its strides."
    store = make_store((FP16, TierSpec(4, 'token', 16, 16)), T=20, evict=(3,))
    query, qpos = torch.randn(2, 3, 4, 16, device=DEVICE).transpose(1, 2), torch.arange(17, 20, device=DEVICE)
    out, _ = triton_read(query, store, qpos, 0.25)
    torch.testing.assert_close(out, triton_read(query.contiguous(), store, qpos, 0.25)[0])

@pytest.mark.skipif(DEVICE != 'cpu', reason='measures CPU allocations')
def test_allocations_do_not_grow_with_rows():
    "torch allocates the output and O(B·H·g·q) statistics per call, whatever the number of stored rows."
    from torch.profiler import profile, ProfilerActivity
    allocated = []
    for T in (48, 192):
        store = make_store((FP16, TierSpec(4, 'token', 16, 16), TierSpec(2, 'channel', 16, 16)), B=1, T=T)
        query, qpos = torch.randn(1, 4, 1, 16), torch.tensor([T - 1])
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            triton_read(query, store, qpos, 0.25)
        allocated.append(sum(max(e.self_cpu_memory_usage, 0) for e in prof.key_averages()))
    assert allocated[0] == allocated[1] < 2 * query.nbytes + 256, allocated

def test_contract_errors():
    "An empty store, or a head_dim that is not a power of 2 >= 16, is refused with a clear error."
    store = LayerStore((FP16,), 1, 1, 16, torch.float32, torch.device(DEVICE), ordered=False, keep_score=False)
    with pytest.raises(ValueError, match='stored rows'): triton_read(torch.randn(1, 1, 1, 16, device=DEVICE), store,
                                                                     torch.tensor([0], device=DEVICE), 0.25)

@pytest.mark.parametrize('strategy,through_triton', [('int8', True), ('h2o', True), ('snapkv', True), ('keynorm', False)])
def test_which_layers_read_through_triton(strategy, through_triton):
    """On CUDA every tiered layer reads through Triton, the strategies that observe attention with their probabilities
    too; one that reads dense keys (keynorm) attends densely, and so does any layer under a padding mask."""
    from kvstrat.cache import CompressedCache, CompressedLayer
    from kvstrat.core import tiny_model
    model = tiny_model('gqa')
    cache = CompressedCache(model, strategy)
    with cache.attached(model), torch.no_grad(): model(torch.randint(1, 256, (1, 40)), cache=cache, use_cache=True)
    layer = next(l for l in cache.layers if isinstance(l, CompressedLayer))
    cuda_query = types.SimpleNamespace(is_cuda=True, shape=(1, 4, 1, 32)) # what reads_with_triton looks at
    assert layer.reads_with_triton(cuda_query, None) == through_triton
    assert not layer.reads_with_triton(cuda_query, torch.ones(1, 41, dtype=torch.bool))
