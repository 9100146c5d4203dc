"""Eviction strategies of `kvstrat.importance` on tiny models (evicted tokens are gone, bytes follow the rows kept),
and randomised checks of the scorers against plain loops."""
import math, pytest, torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from conftest import examples
import kvstrat.importance # registers streamingllm, snapkv and h2o (for the shared matrix too)
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache, CompressedLayer
from kvstrat.policy import make_strategy
from kvstrat.importance import head_layout, keep_top, keep_count, snapkv_scores, topic_shift_scores

torch.set_num_threads(1)

EVICTING = ['streamingllm:budget=12,sinks=2', 'h2o:budget=0.5,sinks=2,window=4', 'h2o:budget=20,sinks=2,window=4,mean=true,adaptive_heads=true',
            'snapkv:budget=0.5,sinks=2,window=4,kernel=3,every_chunk=true', 'h2o:budget=16,sinks=0,window=0,adaptive_heads=false',
            'keynorm:budget=0.5,sinks=2,window=4']

def _held(layer:CompressedLayer) -> list[set]:
    "Positions held by each head of a layer."
    t = layer.store.tiers[0]
    return [set(t.pos[t.heads() == h].tolist()) for h in range(layer.store.B * layer.store.H)]

@pytest.mark.parametrize('spec', EVICTING)
@pytest.mark.parametrize('layout', ['mha', 'gqa', 'mqa'])
def test_evicted_tokens_are_gone(spec, layout):
    model, strategy = tiny_model(layout, seed=2), make_strategy(spec)
    ids = torch.randint(1, 256, (1, 56), generator=torch.Generator().manual_seed(3))
    cache = CompressedCache(model, strategy)
    evicted = {} # (layer, head) -> positions evicted so far
    with cache.attached(model):
        for i in range(0, 56, 8):
            before = [_held(l) if l.is_initialized else [set()] * 8 for l in cache.layers]
            model(ids[:, i:i+8], cache=cache, use_cache=True)
            for j, l in enumerate(cache.layers):
                for h, (b, n) in enumerate(zip(before[j], _held(l))):
                    gone = evicted.setdefault((j, h), set())
                    assert not gone & n, (spec, j, h) # an evicted position never comes back
                    gone |= (b | set(range(i, i + 8))) - n
    for l in cache.layers:
        kept = l.kept().flatten()
        assert int(kept.sum()) < 56 * l.store.H # something was evicted in every layer
        assert all(len(s) == int(k) for s, k in zip(_held(l), kept)) # one row per held position, no duplicates
        t0 = l.store.tiers[0]
        per_row = t0.k.data[0].nbytes + t0.v.data[0].nbytes + 4 + (4 if strategy.needs().scores else 0)
        assert l.nbytes() == int(kept.sum()) * per_row + t0.counts.nbytes + l.store.padding_evicted.nbytes
        K, V, slot_pos = l.store.dense() # what the next attention would read: exactly the rows held
        assert K.shape[2] == int(kept.max())
        for h, s in enumerate(_held(l)):
            row = slot_pos.view(-1, K.shape[2])[h]
            assert set(row[row >= 0].tolist()) == s
    assert cache.nbytes() < cache.fp16_nbytes()

@pytest.mark.parametrize('adaptive', [True, False])
def test_budget_holds_after_every_chunk(adaptive):
    model = tiny_model('mha', seed=4)
    cache = CompressedCache(model, make_strategy(f'h2o:budget=20,sinks=2,window=4,adaptive_heads={adaptive}'))
    ids = torch.randint(1, 256, (1, 64), generator=torch.Generator().manual_seed(5))
    with cache.attached(model):
        for i in range(0, 64, 8):
            model(ids[:, i:i+8], cache=cache, use_cache=True)
            for l in cache.layers:
                kept = l.kept()[0]
                if adaptive: assert int(kept.sum()) == min(i + 8, 20) * l.store.H and (kept >= min(i + 8, 6)).all()
                else: assert (kept == min(i + 8, 20)).all()

def test_streamingllm_keeps_sinks_and_window():
    model = tiny_model('gqa', seed=6)
    cache = CompressedCache(model, make_strategy('streamingllm:budget=0.25,sinks=3'))
    with cache.attached(model): model(torch.randint(1, 256, (1, 60)), cache=cache, use_cache=True)
    for l in cache.layers:
        for s in _held(l): assert s == {0, 1, 2} | set(range(48, 60)) # 15 = ceil(0.25 * 60) tokens

@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60), groups=st.integers(1, 4), quota=st.integers(0, 20))
def test_keep_top_matches_sorting(seed, n, groups, quota):
    g = torch.Generator().manual_seed(seed)
    score, group = torch.rand(n, generator=g), torch.randint(0, groups, (n,), generator=g)
    protected = torch.rand(n, generator=g) < 0.2
    keep = keep_top(score, group, torch.full((groups,), quota), protected)
    for j in range(groups):
        m = group == j
        free = score[m & ~protected].sort(descending=True).values
        n_free = max(quota - int((m & protected).sum()), 0)
        expect = protected[m] | (score[m] >= (free[n_free - 1] if 0 < n_free <= len(free) else math.inf))
        if n_free >= len(free): expect = torch.ones_like(expect)
        assert torch.equal(keep[m], expect)

def _loop_topic_shift(keys, pos, head, window):
    out = torch.zeros(len(pos))
    for h in head.unique().tolist():
        rows = (head == h).nonzero().flatten()
        rows = rows[pos[rows].argsort()]
        for i in range(window, len(rows) - window + 1):
            a, b = keys[rows[i-window:i]].mean(0), keys[rows[i:i+window]].mean(0)
            out[rows[i]] = 1 - F.cosine_similarity(a, b, dim=0)
    return out

@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 50), heads=st.integers(1, 3), window=st.integers(1, 8))
def test_topic_shift_matches_loop(seed, n, heads, window):
    g = torch.Generator().manual_seed(seed)
    keys, head = torch.randn(n, 4, generator=g) + 1, torch.randint(0, heads, (n,), generator=g)
    pos = torch.randperm(n, generator=g) # unique positions, rows in any order
    torch.testing.assert_close(topic_shift_scores(keys, pos, head, window), _loop_topic_shift(keys, pos, head, window),
                               atol=1e-5, rtol=1e-5)

@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), kernel=st.sampled_from([1, 3, 7]))
def test_snapkv_pool_matches_loop(seed, n, kernel):
    g = torch.Generator().manual_seed(seed)
    probs, head, pos = torch.rand(n, 5, generator=g), torch.randint(0, 2, (n,), generator=g), torch.randperm(n, generator=g)
    got = snapkv_scores(probs, pos, head, kernel)
    s = probs.sum(1)
    for i in range(n):
        rows = (head == head[i]).nonzero().flatten()
        rows = rows[pos[rows].argsort()]
        r = (rows == i).nonzero().item()
        assert math.isclose(got[i].item(), s[rows[max(r - kernel // 2, 0):r + kernel // 2 + 1]].max().item(), rel_tol=1e-6)

def test_head_layout_orders_by_position():
    pos, head = torch.randperm(30), torch.randint(0, 3, (30,))
    idx = head_layout(pos, head)
    for h in range(3):
        row = idx[h][idx[h] >= 0]
        assert torch.equal(pos[row], pos[head == h].sort().values)

def test_keep_count():
    assert [keep_count(b, 100) for b in (0.5, 0.33, 0.25, 1.0, 64)] == [50, 33, 25, 100, 64]
