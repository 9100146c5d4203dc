"""The CPU tiered and blocked reads of heads that hold unequal rows in a tier (per-head eviction, per-head precision:
some heads with no row in a tier at all), against the reference read and the dense read, with the CPU kernels on and
off: random formats (keys and values of different widths too), GQA groups, one query and chunks, bounded memory."""
import random
from dataclasses import dataclass
from typing import ClassVar
import pytest, torch
from kvstrat import kernels
from kvstrat.policy import Strategy
from kvstrat.formats import FP16, TierSpec
from kvstrat.store import LayerStore
from kvstrat.attention import blocked_read, dense_read, equal_heads, fused_read, head_groups, reference_read, tiered_read

FORMATS = [TierSpec(8, 'token', 16, 16, symmetric=True), TierSpec(4, 'token', 8, 16, value_bits=2),
           TierSpec(2, 'token', 16, 8, rotate=True, scale_bits=8, value_bits=4),
           TierSpec(3, 'token', 16, 16, value_bits=8), TierSpec(4, 'channel', 4, 16, value_bits=2),
           TierSpec(2, 'channel', 4, 16, rotate=True, scale_bits=8, value_bits=8), TierSpec(rank=3),
           TierSpec(fp_dtype=torch.bfloat16)]
KERNELS = [True, False] if kernels.kernels_available() else [False]

def ragged_store(specs, B, H, T, q, seed, D=16):
    "`T` tokens per head; each head's tokens before the chunk's last `q` go to a random subset of tiers, some evicted."
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    s = LayerStore(specs, B, H, D, torch.float32, 'cpu', ordered=False, keep_score=False)
    s.write(torch.randn(B, H, T, D, generator=gen), torch.randn(B, H, T, D, generator=gen))
    pos, heads = s.positions()[0], s.tiers[0].heads()
    target = torch.zeros_like(pos)
    for h in range(B * H):
        allowed = rng.sample(range(len(specs) + 1), rng.randint(1, len(specs) + 1)) # tiers this head's old rows use
        old = ((heads == h) & (pos < T - q)).nonzero().flatten()
        target[old] = torch.tensor([rng.choice(allowed) for _ in old], dtype=target.dtype)
    s.move(target)
    return s

def fused_declines(store) -> bool:
    "Does a tier hold a format fused_read leaves to tiered_read (low-rank)? Partial key groups it reads as pieces."
    return any(t.n and t.spec.rank is not None for t in store.tiers)

def check(store, Hq, q, block=4, scaling=0.3, seed=0):
    """tiered_read (with and without probs, kernels on and off), fused_read and blocked_read against the reference and
    dense reads; fused_read declines only low-rank tiers."""
    torch.manual_seed(seed)
    query, qpos = torch.randn(store.B, Hq, q, store.D), torch.arange(store.seen - q, store.seen)
    ref = reference_read(query, store, qpos, None, scaling)
    dense_out, dense_probs, _ = dense_read(query, store, qpos, None, scaling, want_probs=True)
    torch.testing.assert_close(dense_out, ref, rtol=1e-4, atol=1e-4)
    for on in KERNELS:
        with kernels.use_kernels(on):
            out, probs = tiered_read(query, store, qpos, scaling, want_probs=True)
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(probs, dense_probs, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(tiered_read(query, store, qpos, scaling)[0], ref, rtol=1e-4, atol=1e-4)
            fused = fused_read(query, store, qpos, scaling)
            assert (fused is None) == (not on or fused_declines(store))
            if fused is not None: torch.testing.assert_close(fused, ref, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(blocked_read(query, store, qpos, scaling, block=block), ref, rtol=1e-4,
                                       atol=1e-4)

@pytest.mark.parametrize('seed', range(24))
def test_random_ragged_stores(seed):
    "Two or three tiers of random formats, random rows per head per tier (zero included), B, H, g and q random."
    rng = random.Random(seed)
    specs = (rng.choice([FP16, TierSpec(fp_dtype=None)]), *rng.sample(FORMATS, rng.randint(1, 2)))
    B, H, g, q = rng.choice([1, 2]), rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 3, 5])
    store = ragged_store(specs, B, H, rng.randint(q + 8, 40), q, seed)
    check(store, H * g, q, block=rng.choice([1, 4, 1024]), seed=seed)

def test_per_head_precision():
    "Each head's old tokens all in its own tier (head 0 INT4, head 1 INT2, ...): every deeper tier is part-empty."
    specs = (FP16, TierSpec(4, 'token', 16, 16), TierSpec(2, 'token', 16, 16, value_bits=4))
    s = LayerStore(specs, 1, 4, 16, torch.float32, 'cpu', ordered=False, keep_score=False)
    s.write(torch.randn(1, 4, 30, 16), torch.randn(1, 4, 30, 16))
    pos, heads = s.positions()[0], s.tiers[0].heads()
    s.move(torch.where(pos < 26 - heads, 1 + heads % 2, 0)) # heads 0, 2 -> INT4; 1, 3 -> INT2; unequal counts
    assert [t.counts.tolist() for t in s.tiers] == [[4, 5, 6, 7], [26, 0, 24, 0], [0, 25, 0, 23]]
    assert not equal_heads(s) and [n for _, n in head_groups(s.tiers[1])] == [24, 26]
    for q in (1, 4): check(s, 8, q)

@pytest.mark.parametrize('rotate', [False, True])
def test_whole_channel_groups_in_blocks(rotate):
    "Per-channel keys in whole groups, heads of unequal (and zero) counts: blocks of whole groups gathered per head."
    spec = TierSpec(4, 'channel', 4, 16, rotate=rotate, scale_bits=8, value_bits=2)
    s = LayerStore((FP16, spec), 1, 4, 16, torch.float32, 'cpu', ordered=False, keep_score=False)
    s.write(torch.randn(1, 4, 20, 16), torch.randn(1, 4, 20, 16))
    pos, heads = s.positions()[0], s.tiers[0].heads()
    s.move(torch.where(pos < torch.tensor([8, 0, 12, 8])[heads], 1, 0)) # rows per head: 8, 0, 12, 8; groups of 4
    assert s.tiers[1].counts.tolist() == [8, 0, 12, 8] and len(s.tiers[1].k.group_sizes) * 4 == s.tiers[1].n
    for q in (1, 3): check(s, 8, q, block=4)

def test_every_head_with_rows_shares_the_tier():
    "When the heads holding rows all hold the same count, the sub-tier reads the tier's own tensors, copying none."
    from kvstrat.attention import _rows_of
    s = LayerStore((FP16, TierSpec(4, 'token', 16, 16)), 1, 3, 16, torch.float32, 'cpu', ordered=False,
                   keep_score=False)
    s.write(torch.randn(1, 3, 12, 16), torch.randn(1, 3, 12, 16))
    pos, heads = s.positions()[0], s.tiers[0].heads()
    s.move(torch.where((heads != 1) & (pos < 6), 1, 0)) # heads 0 and 2 hold 6 rows of tier 1, head 1 none
    [(group, n)] = head_groups(s.tiers[1])
    assert group.tolist() == [0, 2] and n == 6
    sub = _rows_of(s.tiers[1], group, n, 0, n)
    assert sub.k.data.data_ptr() == s.tiers[1].k.data.data_ptr() and sub.v.scale is s.tiers[1].v.scale
    check(s, 3, 2)

def _largest_allocation(T, spec, kernels_on):
    "Largest allocation of a ragged read (deeper tier: all old rows of head 0, 2/3 of head 1's, none of head 2's)."
    from torch.profiler import profile, ProfilerActivity
    s = LayerStore((FP16, spec), 1, 3, 16, torch.float32, 'cpu', ordered=False, keep_score=False)
    s.write(torch.randn(1, 3, T, 16), torch.randn(1, 3, T, 16))
    pos, heads = s.positions()[0], s.tiers[0].heads()
    evicted = (heads == 2) | ((heads == 1) & (pos % 3 == 0)) # each head keeps its newest 8 tokens in tier 0
    s.move(torch.where(pos >= T - 8, 0, torch.where(evicted, 2, 1)))
    query = torch.randn(1, 6, 1, 16)
    with kernels.use_kernels(kernels_on), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = (tiered_read(query, s, torch.tensor([T - 1]), 0.2)[0] if kernels_on # whole tiers, from the codes
               else blocked_read(query, s, torch.tensor([T - 1]), 0.2, block=32)) # the torch read, 32 rows at a time
    assert not equal_heads(s)
    torch.testing.assert_close(out, reference_read(query, s, torch.tensor([T - 1]), None, 0.2), rtol=1e-4, atol=1e-4)
    return max(e.self_cpu_memory_usage for e in prof.events()), 2 * 3 * T * 16 * 4 # K and V of (1, 3, T, 16) in fp32

@pytest.mark.parametrize('kernels_on', KERNELS)
def test_ragged_read_makes_no_dense_copy(kernels_on):
    "The blocked torch read allocates the same at 4x the context; neither it nor the kernels' read copies the layer."
    spec = TierSpec(4, 'token', 16, 16, symmetric=True)
    (small, _), (large, fp32_copy) = (_largest_allocation(T, spec, kernels_on) for T in (256, 1024))
    assert large * 8 < fp32_copy, (large, fp32_copy)
    if not kernels_on: assert small == large, (small, large)

@dataclass
class PerHeadPrecision(Strategy):
    "Test-only (not registered): the newest `window` tokens in fp16; older ones of even heads INT4, of odd heads INT2."
    name: ClassVar[str] = 'per-head-precision-test'
    window: int = 6
    def tiers(self, head_dim): return (FP16, TierSpec(4, 'token', 16, 16), TierSpec(2, 'token', 16, 16, value_bits=4))
    def assign(self, view):
        old = view.pos < view.seen - self.window - (view.head % view.n_kv_heads) # unequal counts across heads too
        return torch.where(old, 1 + view.head % 2, view.tier)

def test_cache_reads_per_head_precision_in_place():
    "Through a model: the cache reads the part-empty tiers in place (no dense copy), giving the dense read's logits."
    from kvstrat.cache import CompressedCache, CompressedLayer
    from kvstrat.core import tiny_model
    model, ids = tiny_model('gqa', seed=1), torch.randint(1, 256, (1, 40))
    def run(tiered):
        cache = CompressedCache(model, PerHeadPrecision(), tiered=tiered)
        with cache.attached(model), torch.no_grad():
            logits = [model(ids[:, i:i + 8], cache=cache, use_cache=True).logits for i in range(0, 24, 8)]
            logits += [model(ids[:, i:i + 1], cache=cache, use_cache=True).logits for i in range(24, 40)]
        return torch.cat(logits, 1), [l for l in cache.layers if isinstance(l, CompressedLayer)]
    (fast, layers), (dense, _) = run(True), run(False)
    torch.testing.assert_close(fast, dense, atol=1e-4, rtol=1e-4)
    assert all(not equal_heads(l.store) and l.reads_tiers(None) for l in layers)
    assert all(0 in t.counts.tolist() for l in layers for t in l.store.tiers[1:]) # each deeper tier part-empty
