"""Stratigraphic's invariants over random settings (hypothesis): rows only sink, sinks, the recent window and anchors
stay exact, the byte target is met as `cache.nbytes()` measures it, and the calibrated allocation meets any target in
range; with eviction, the evicting heads hold their sinks and window alone (with `recent`, its newest and the most
attended), and heads whose window is quantised their sinks and newest tokens."""
import math, warnings
from dataclasses import replace
import torch
from hypothesis import example, given, settings, strategies as st
from conftest import examples
from kvstrat.stratigraphic import *
from kvstrat.sensitivity import bytes_reach, format_row_bytes

MODEL = tiny_model('gqa', seed=2) # head_dim 32, 2 KV heads, 2 layers

def _run(strategy, T:int, chunk:int, seed:int):
    "Feed T random tokens in chunks; after each chunk, every row's tier by (layer, flat head, position)."
    ids = torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(seed))
    cache, history = CompressedCache(MODEL, strategy), []
    with cache.attached(MODEL), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for i in range(0, T, chunk):
            MODEL(ids[:, i:i+chunk], cache=cache, use_cache=True)
            history.append({(l, int(h), int(p)): j for l, layer in enumerate(cache.layers)
                            for j, (t, pos) in enumerate(zip(layer.store.tiers, layer.store.positions()))
                            for h, p in zip(t.heads().tolist(), pos.tolist())})
    return cache, history

# the default (rotated), and the ablation's settings: unrotated, fixed layer shares without the 3-bit tier; per-row
# demotion; anchors; tier 0 at 8 or 4 bits
SETTINGS = [dict(), dict(schedule='inverted', widths='8/4/2', rotate=False), dict(schedule='uniform', keys='token'),
            dict(anchors=2), dict(top_bits=8), dict(top_bits=4)]

def _anchors(snapshot:dict, sinks:int) -> set:
    "The rows past the sinks a snapshot holds at fp16 though a newer row of their head has sunk: the anchors."
    newest_sunk = {}
    for (l, h, p), tier in snapshot.items():
        if tier > 0: newest_sunk[l, h] = max(newest_sunk.get((l, h), -1), p)
    return {(l, h, p) for (l, h, p), tier in snapshot.items() if tier == 0 and sinks <= p < newest_sunk.get((l, h), -1)}

@settings(max_examples=examples(12), deadline=None)
@given(frac=st.floats(0, 1), residual=st.integers(0, 12), sinks=st.integers(0, 4),
       chunk=st.sampled_from([5, 16]), seed=st.integers(0, 1000), setting=st.sampled_from(SETTINGS))
@example(frac=1.0, residual=0, sinks=0, chunk=5, seed=0, setting=SETTINGS[0]) # the top: every head at 2 bits
@example(frac=1.0, residual=0, sinks=0, chunk=5, seed=0, setting=SETTINGS[2])
@example(frac=0.0, residual=12, sinks=4, chunk=16, seed=1, setting=SETTINGS[1]) # the bottom: every head at 8 bits
@example(frac=1.0, residual=4, sinks=2, chunk=5, seed=3, setting=SETTINGS[3])
@example(frac=1.0, residual=0, sinks=0, chunk=5, seed=0, setting=SETTINGS[4])
@example(frac=0.0, residual=0, sinks=0, chunk=5, seed=452, setting=SETTINGS[3]) # a run's most attended, its newest
def test_rows_sink_one_way_and_the_target_is_met(frac, residual, sinks, chunk, seed, setting):
    T = 160
    s = Stratigraphic(residual=residual, sinks=sinks, group=8, length=T, calibration='uniform', window=None,
                      **setting)
    _, nbytes = s.head_choices(uniform_sensitivity(ModelSpec.of(MODEL), s.family), 32) # as the plan counts them
    lo, hi = (T * 4 * 32 / x.mean().item() for x in (nbytes.max(1).values, nbytes.min(1).values)) # 8 and 2 bits
    s = replace(s.resolved(), ratio=lo + frac * (hi - lo)) # anywhere in the reachable range, both ends included
    ratio = s.ratio
    cache, history = _run(s, T, chunk, seed)
    for before, after in zip(history, history[1:]):
        for key, tier in before.items(): assert after[key] == tier or (tier == 0 and after[key] > 0), key # one way
        for key in _anchors(before, sinks): assert after[key] == 0, key # an anchor is never demoted
    last = history[-1]
    for (l, h, p), tier in last.items():
        if p < sinks or p >= T - residual: assert tier == 0, (l, h, p) # sinks and the window stay in tier 0
    sunk = {}
    for (l, h, p), tier in last.items(): sunk[l, h] = sunk.get((l, h), 0) + (tier > 0)
    for (l, h), n in sunk.items(): # each whole run sank `group` rows, its newest among them, and kept its anchors
        kept = sum(1 for (l2, h2, _) in _anchors(last, sinks) if (l2, h2) == (l, h))
        assert kept == n // 8 * s.anchors, (l, h, n, kept)
    assert len(last) == 2 * 2 * T # nothing is evicted
    allowed = {int(b) for b in s.widths.split('/')}
    assert set(cache.derived.widths.unique().tolist()) <= allowed, cache.derived.widths
    assert cache.fp16_nbytes() / cache.nbytes() >= ratio # as measured, with no slack

@settings(max_examples=examples(8), deadline=None)
@given(frac=st.floats(0, 1), window=st.integers(2, 24), sinks=st.integers(0, 4),
       chunk=st.sampled_from([5, 16]), seed=st.integers(0, 1000), recent=st.one_of(st.none(), st.integers(0, 24)),
       drop_group=st.integers(1, 8))
@example(frac=1.0, window=2, sinks=0, chunk=5, seed=0, recent=None, drop_group=1) # the top: every head evicts
@example(frac=1.0, window=12, sinks=2, chunk=5, seed=0, recent=4, drop_group=1) # every head keeps 8 rows by attention
@example(frac=1.0, window=12, sinks=2, chunk=16, seed=0, recent=0, drop_group=1) # ... and all 12
@example(frac=1.0, window=12, sinks=2, chunk=5, seed=0, recent=4, drop_group=6) # drops 6 at once: holds 7 to 12
def test_evicting_heads_keep_sinks_and_window_and_the_target_is_met(frac, window, sinks, chunk, seed, recent,
                                                                    drop_group):
    T = 160
    recent = None if recent is None else min(recent, window) # with `recent`, the rest of the window by attention
    drop_group = 1 if recent is None else min(drop_group, window - recent + 1) # the newest `recent` always stay
    s = Stratigraphic(residual=8, sinks=sinks, group=8, length=T, window=window, calibration='uniform',
                      quantised_window=False, recent=recent, drop_group=drop_group) # windows at fp16: the quantised
                                                                                    # ones are the next test's
    _, nbytes = s.head_choices(uniform_sensitivity(ModelSpec.of(MODEL), s.family, window), 32)
    lo, hi = (T * 4 * 32 / x.mean().item() for x in (nbytes.max(1).values, nbytes.min(1).values))
    s = replace(s.resolved(), ratio=lo + frac * (hi - lo)) # anywhere in reach, evicting every head at the top
    ratio = s.ratio
    cache, history = _run(s, T, chunk, seed)
    for before, after in zip(history, history[1:]):
        for key, tier in before.items(): # one way: a row stays, sinks, or is evicted and never comes back
            assert key not in after or after[key] == tier or (tier == 0 and after[key] > 0), key
    gone = {key for before in history for key in before} - set(history[-1])
    evicts = cache.derived.widths[..., 0] == 0
    for l, layer in enumerate(cache.layers):
        for h in range(layer.store.B * layer.store.H):
            mine = sorted(p for (l2, h2, p) in history[-1] if (l2, h2) == (l, h))
            if not evicts[l, h % layer.store.H]: assert mine == list(range(T)), (l, h) # it keeps every token
            elif recent is None: assert mine == [*range(sinks), *range(T - window, T)], (l, h, mine)
            else: # its sinks, its newest `recent`, and more of the older rows, as many as its window holds or, just
                # after a drop of `drop_group`, `drop_group - 1` fewer
                assert sinks + window - drop_group + 1 <= len(mine) <= sinks + window, (l, h, len(mine))
                assert set(range(sinks)) | set(range(T - recent, T)) <= set(mine)
    assert all(p >= sinks for _, _, p in gone) # sinks are never evicted
    assert cache.fp16_nbytes() / cache.nbytes() >= ratio

def _windowed(frac, window, sinks, top_bits, plain, chunk=5, seed=0, schedule='calibrated'): # an example to keep
    return example(frac=frac, window=window, sinks=sinks, chunk=chunk, seed=seed, top_bits=top_bits, plain=plain,
                   schedule=schedule)

@settings(max_examples=examples(8), deadline=None)
@given(frac=st.floats(0, 1), window=st.integers(2, 40), sinks=st.integers(0, 4),
       chunk=st.sampled_from([5, 16]), seed=st.integers(0, 1000), top_bits=st.sampled_from([16, 8, 4]),
       plain=st.booleans(), schedule=st.sampled_from(['calibrated', 'inverted']))
@_windowed(1.0, 40, 2, 16, True) # the top: the windows at 2 bits
@_windowed(0.9, 4, 0, 16, True, chunk=16, seed=1) # a window shorter than tier 0's rows
@_windowed(0.7, 40, 2, 8, True) # 2 heads evict plainly
@_windowed(0.7, 40, 2, 8, False) # ... and none may here
@_windowed(0.5, 2, 0, 16, False) # a window shorter than tier 0's rows, where plain eviction, fewest, is left out
@_windowed(1.0, 2, 0, 16, False)
@_windowed(0.9, 2, 2, 16, False, schedule='inverted') # ... with fixed layer shares
def test_windowed_heads_keep_sinks_and_their_newest_and_the_target_is_met(frac, window, sinks, chunk, seed, top_bits,
                                                                           plain, schedule):
    T, residual, group = 160, 8, 8
    s = Stratigraphic(residual=residual, sinks=sinks, group=group, length=T, window=window, calibration='uniform',
                      top_bits=top_bits, plain_eviction=plain, schedule=schedule)
    cost, nbytes = s.head_choices(uniform_sensitivity(ModelSpec.of(MODEL), s.family, window), 32)
    lo, hi = (T * 4 * 32 / x.mean().item() for x in reversed(bytes_reach(cost, nbytes))) # plain eviction: if allowed
    s = replace(s.resolved(), ratio=lo + frac * (hi - lo)) # the settings priced above
    ratio = s.ratio
    cache, history = _run(s, T, chunk, seed)
    for before, after in zip(history, history[1:]):
        for key, tier in before.items(): # one way: a row stays, sinks, or is evicted and never comes back
            assert key not in after or after[key] == tier or (tier == 0 and after[key] > 0), key
    gone = {key for before in history for key in before} - set(history[-1])
    plan = cache.derived
    if not plain: assert not (plan.widths[..., 0] == 0).any(), plan.widths # no head evicts with its window in tier 0
    if frac == 1: # the top: every head takes its fewest bytes, a quantised window where that is fewer than fp16's
        fewest = nbytes.where(cost.isfinite(), math.inf).argmin(1)
        assert plan.windowed.flatten().tolist() == (fewest > len(s.bit_widths()) ** 2).tolist()
    for l, layer in enumerate(cache.layers):
        for h in range(layer.store.B * layer.store.H):
            mine = sorted(p for (l2, h2, p) in history[-1] if (l2, h2) == (l, h))
            if plan.windowed[l, h % layer.store.H]: # its sinks, then its newest: the window, up to two groups more
                n = len(mine) - sinks
                assert mine == [*range(sinks), *range(T - n, T)], (l, h, mine)
                assert window <= n <= max(window + group - 1, residual) + group - 1, (l, h, n) # whole groups below
            elif plan.widths[l, h % layer.store.H, 0] == 0: assert mine == [*range(sinks), *range(T - window, T)]
            else: assert mine == list(range(T)), (l, h)
    assert all(p >= sinks for _, _, p in gone) # sinks are never evicted
    assert cache.fp16_nbytes() / cache.nbytes() >= ratio

@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0, 1))
def test_allocation_meets_any_target_in_range(seed, frac):
    g = torch.Generator().manual_seed(seed)
    sens = Sensitivity(torch.rand(3, 2, 2, 4, generator=g).cumsum(-1)) # fewer bits cost more
    rb = format_row_bytes(FormatFamily(), 64)
    lo, hi = rb.min(1).values.sum().item(), rb.max(1).values.sum().item()
    target = lo + frac * (hi - lo)
    w = allocate(sens, rb, target)
    spent = rb[torch.arange(2), w].sum(-1).mean().item()
    assert spent <= target + 1e-6
    # Lagrangian + greedy fill: no single upgrade that fits is left out
    cost = sens.cost.gather(-1, w[..., None])[..., 0]
    for idx in torch.cartesian_prod(*[torch.arange(n) for n in w.shape]).tolist():
        l, h, kv = idx
        j = int(w[l, h, kv])
        if j > 0: assert spent + (rb[kv, j - 1] - rb[kv, j]).item() / (3 * 2) > target - 1e-6 or \
            sens.cost[l, h, kv, j - 1] >= cost[l, h, kv]


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0, 1), window=st.sampled_from([None, 16]))
@example(seed=0, frac=0.0, window=None) # the bottom of the range: every head at 8 bits
@example(seed=0, frac=1.0, window=16) # the top: every head at its cheapest choice
def test_calibrated_plan_meets_any_target_in_range(tmp_path_factory, seed, frac, window):
    "Stratigraphic's own knapsack on measured-like costs, unlike across heads: any ratio in reach is met, as measured."
    T, g = 160, torch.Generator().manual_seed(seed)
    s = Stratigraphic(residual=8, sinks=2, group=8, length=T, window=window, quantised_window=False, top_bits=16)
    sens = uniform_sensitivity(ModelSpec.of(MODEL), s.family, window)
    sens.cost = torch.rand(sens.cost.shape, generator=g).cumsum(-1) # each head its own costs; fewer bits cost more
    sens.residual = s.settings.residual # measured as the plan reads: fp16 newest rows beside the sinks
    sens.source = f'random costs, seed {seed}'
    if window: sens.evict = 2 * torch.rand(sens.evict.shape, generator=g) * sens.cost[..., -1].sum(-1) # either side
    sens.save(path := tmp_path_factory.mktemp('calibration')/'random.json')
    _, nbytes = s.head_choices(sens, 32)
    lo, hi = (T * 4 * 32 / x.mean().item() for x in (nbytes.max(1).values, nbytes.min(1).values))
    s = replace(s.resolved(), ratio=lo + frac * (hi - lo), calibration=str(path))
    cache, _ = _run(s, T, 16, seed)
    assert cache.derived.source == sens.source # planned from these costs
    assert cache.fp16_nbytes() / cache.nbytes() >= s.ratio
