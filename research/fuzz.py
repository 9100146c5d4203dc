"""Random use of every strategy on tiny models, to find what the fixed tests do not: a search, not a test.

    python research/fuzz.py chunks SEED RUNS          # random batch, length and chunking on seven layouts
    python research/fuzz.py ops SEED RUNS             # padded batches, steps, chunks, beam reorders and crops
    python research/fuzz.py params SEED RUNS          # each strategy's example with numeric fields drawn afresh
    python research/fuzz.py stratigraphic SEED RUNS   # Stratigraphic's whole parameter space, bytes measured
    python research/fuzz.py padding SEED RUNS         # a left-padded row against the same prompt alone, chunked

Every run must end with finite logits and `get_seq_length()` right. A refusal (`ValueError` or `TypeError`) is
fine, except in `params`, where a refusal that reads like torch's internals and names no strategy is reported.
Anything else is reported with its draw, and the first few with their traceback. In `stratigraphic`, the measured
compression after `length` tokens must reach the ratio. In `padding`, each head of the padded row must hold as many
rows in each tier as the prompt alone's, and its logits match (to 2e-2: a quantised code may round the other way). A
run takes tens of milliseconds; see the research diary of 2026-12-05.
"""
import sys, random, warnings, traceback, dataclasses, itertools
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).parents[1]/'tests'))
import conftest # noqa: F401  (Triton's interpreter on the CPU, as the tests run)
from test_strategies import VARIANTS # the matrix's variants, and its test-only strategy registered
from kvstrat.core import tiny_model
from kvstrat.cache import CompressedCache, CompressedLayer, prefill_cache
from kvstrat.policy import STRATEGIES, field_type, make_strategy
from kvstrat.stratigraphic import Stratigraphic

# documented refusals: ours (a plan out of reach of a model whose every layer slides, among them), and sliding-window
# layers, which cannot crop once their window is full
EXPECTED = ('single KV head', 'soft-cap', 'cannot crop', 'activate_past_recording', 'sliding-window layers hold')

def strategy_named(name): return make_strategy(VARIANTS[name]) if name in VARIANTS else STRATEGIES[name].example()

def feed(model, cache, ids, rng, first=None):
    "Feed `ids` (B, T) in random chunks, single steps most often; every logit must be finite."
    T, i = ids.shape[1], 0
    with cache.attached(model), torch.no_grad():
        while i < T:
            c = min(first if i == 0 and first else rng.choice([1, 1, 1, rng.randint(1, 24)]), T - i)
            out = model(ids[:, i:i + c], cache=cache, use_cache=True); i += c
            assert torch.isfinite(out.logits).all(), 'non-finite logits'
    assert cache.get_seq_length() == T, (cache.get_seq_length(), T)

def chunks(rng, models, it, draw):
    name, layout = rng.choice(sorted(STRATEGIES) + sorted(VARIANTS)), rng.choice(list(models))
    B, T = rng.choice([1, 2]), rng.randint(1, 160)
    draw.append(f'{name} {layout} B={B} T={T}')
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(it))
    feed(models[layout], CompressedCache(models[layout], strategy_named(name)), ids, rng, rng.randint(1, T))

def ops(rng, models, it, draw):
    name, layout = rng.choice(sorted(STRATEGIES) + sorted(VARIANTS)), rng.choice(list(models))
    model, B, T = models[layout], rng.choice([1, 2, 3]), rng.randint(1, 120)
    pad = rng.choice([0, 0, rng.randint(1, max(1, T - 1))]) if B > 1 else 0
    g = torch.Generator().manual_seed(it)
    mask = torch.ones(B, T, dtype=torch.long); mask[0, :pad] = 0 # row 0 left-padded
    cache = CompressedCache(model, strategy_named(name))
    draw.append(f'{name} {layout} B={B} T={T} pad={pad}')
    with cache.attached(model), torch.no_grad():
        model(torch.randint(1, 256, (B, T), generator=g), attention_mask=mask,
              position_ids=(mask.cumsum(-1) - 1).clamp(min=0), cache=cache, use_cache=True)
        for _ in range(rng.randint(1, 12)):
            op, seen = rng.choice(['step', 'step', 'chunk', 'reorder', 'crop']), mask.shape[1]
            if op in ('step', 'chunk'):
                c = 1 if op == 'step' else rng.randint(2, 20)
                mask = torch.cat([mask, torch.ones(B, c, dtype=torch.long)], 1)
                out = model(torch.randint(1, 256, (B, c), generator=g), attention_mask=mask,
                            position_ids=(mask.cumsum(-1) - 1)[:, -c:], cache=cache, use_cache=True)
                assert torch.isfinite(out.logits).all(), 'non-finite logits'
                draw.append(f'{op} {c}')
            elif op == 'reorder':
                idx = torch.tensor([rng.randrange(B) for _ in range(B)])
                cache.reorder_cache(idx); mask = mask[idx]; draw.append(f'reorder {idx.tolist()}')
            elif seen > 1:
                k = rng.randint(1, max(1, min(seen - 1, seen // 3)))
                cache.crop(-k); mask = mask[:, :seen - k]; draw.append(f'crop {k}')
            assert cache.get_seq_length() == mask.shape[1], (cache.get_seq_length(), mask.shape[1])

def drawn(rng, value, annotation):
    "A value for a numeric or boolean field near `value`: 0, ±1, halved, doubled, negative, random, None if allowed."
    typ, optional = field_type(annotation)
    none = [None] if optional else []
    if typ == 'bool': return rng.choice([True, False])
    if typ == 'int':
        base = value if isinstance(value, int) else 8
        return rng.choice([0, 1, -1, base, base * 2, base // 2 or 2, rng.randint(0, 64)] + none)
    if typ == 'float':
        base = value if isinstance(value, (int, float)) else 0.5
        return rng.choice([0.0, 1.0, base, base * 2, base / 2, rng.uniform(0, 2 * max(base, 1)), -0.5] + none)
    return value

def params(rng, models, it, draw):
    name, layout = rng.choice(sorted(STRATEGIES)), rng.choice(list(models))
    example = STRATEGIES[name].example()
    kw = {f.name: drawn(rng, getattr(example, f.name), f.type) for f in dataclasses.fields(example)
          if rng.random() < 0.35}
    B, T = rng.choice([1, 2]), rng.randint(1, 140)
    draw.append(f'{name} {layout} B={B} T={T} {kw}')
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(it))
    try: feed(models[layout], CompressedCache(models[layout], dataclasses.replace(example, **kw)), ids, rng)
    except (ValueError, TypeError) as e:
        if name not in str(e) and any(w in str(e) for w in ('split_with_sizes', 'size of tensor', 'must match')):
            raise AssertionError(f'a refusal in torch\'s words: {e}') from None
        raise

def stratigraphic(rng, models, it, draw):
    layout, length = rng.choice(['gqa', 'mha', 'mqa']), rng.randint(40, 200)
    keys = rng.choice(['channel', 'channel', 'token'])
    s = Stratigraphic(ratio=round(rng.uniform(1, 6), 2), residual=rng.randint(0, 16), sinks=rng.randint(0, 6),
                      group=rng.choice([8, 16, 32] if keys == 'token' else [4, 8, 16, 32]), length=length,
                      calibration='uniform', window=rng.choice([None, rng.randint(1, 48)]),
                      widths=rng.choice(['8/4/3/2', '8/4/2', '4/2', '8', '2', '8/3']),
                      schedule=rng.choice(['calibrated', 'calibrated', 'uniform', 'inverted', 'pyramid']), keys=keys,
                      rotate=rng.choice([True, False]), anchors=rng.choice([0, 0, rng.randint(1, 3)]),
                      quantised_window=rng.choice([True, False]), top_bits=rng.choice([None, 16, 8]),
                      plain_eviction=rng.choice([None, None, None, True, False]))
    model, B = models[layout], rng.choice([1, 2])
    draw.append(f'{layout} B={B} {s.label}')
    cache = CompressedCache(model, s)
    feed(model, cache, torch.randint(0, 256, (B, length), generator=torch.Generator().manual_seed(it)), rng,
         rng.randint(1, length))
    measured = cache.fp16_nbytes() / cache.nbytes()
    assert measured >= s.ratio, f'measured {measured:.4f}x, short of the ratio (planned {cache.derived.planned:.4f}x)'

def fed(model, cache, ids, mask, sizes) -> torch.Tensor: # (B, T) ×2, chunk sizes -> (B, T, V) logits
    "Feed `ids` chunk by chunk through `prefill_cache`, which counts positions from each row's first real token."
    out, i = [], 0
    with cache.attached(model), torch.no_grad():
        for c in sizes:
            out.append(prefill_cache(model, cache, ids[:, i:i + c], attention_mask=mask[:, :i + c]).logits); i += c
    return torch.cat(out, 1)

def held(cache, b:int) -> list: # rows of each head of sequence b in each tier, every compressed layer
    return [t.counts.view(l.store.B, -1)[b].tolist() for l in cache.layers if isinstance(l, CompressedLayer)
            for t in l.store.tiers]

def regroup(sizes:list[int], pad:int) -> list[int]:
    "The chunks in which the real tokens of a row left-padded by `pad` arrive, when the batch arrives in `sizes`."
    ends = [end - pad for end in itertools.accumulate(sizes) if end > pad]
    return [b - a for a, b in zip([0] + ends, ends)]

def padding(rng, models, it, draw):
    name, layout = rng.choice(sorted(STRATEGIES) + sorted(VARIANTS)), rng.choice(list(models))
    model, T, pad = models[layout], rng.randint(2, 110), rng.randint(1, 40)
    sizes, left = [], pad + T + rng.randint(1, 8) # random chunks, single steps often
    while left: sizes.append(min(rng.choice([1, rng.randint(1, 48)]), left)); left -= sizes[-1]
    draw.append(f'{name} {layout} T={T} pad={pad} chunks={sizes}')
    g = torch.Generator().manual_seed(it)
    prompt, other = torch.randint(1, 256, (T + 8,), generator=g), torch.randint(1, 256, (pad + T + 8,), generator=g)
    ids = torch.stack([other, torch.cat([torch.zeros(pad, dtype=torch.long), prompt])])[:, :sum(sizes)]
    mask = torch.ones_like(ids); mask[1, :pad] = 0
    padded, alone = (CompressedCache(model, strategy_named(name)) for _ in range(2))
    batched = fed(model, padded, ids, mask, sizes)[1, pad:]
    single = fed(model, alone, ids[1:, pad:], mask[1:, pad:], regroup(sizes, pad))[0]
    assert held(padded, 1) == held(alone, 0), 'the padded row holds other rows than the prompt alone'
    # same rows, logits to 2e-2: draws with identical rows differed by up to 7.6e-3 (likely a code rounding otherwise)
    assert torch.allclose(batched, single, atol=2e-2, rtol=2e-2), f'max |Δlogit| {(batched - single).abs().max():.2e}'

LAYOUTS = {'chunks': ('gqa', 'mha', 'mqa', 'sliding', 'qwen2.5', 'gemma3', 'phi3'),
           'ops': ('gqa', 'mha', 'mqa', 'gemma3', 'qwen2.5'), 'params': ('gqa', 'mha', 'qwen2.5'),
           'stratigraphic': ('gqa', 'mha', 'mqa'), 'padding': ('gqa', 'mha', 'mqa', 'gemma3', 'qwen2.5')}

def search(kind:str, seed:int, runs:int) -> tuple[int, int, list[str]]:
    "Runs that ran, runs refused, and a line for each failure (the first three print their traceback)."
    warnings.simplefilter('ignore') # out-of-range targets warn; the fuzz looks at what fails
    rng, models = random.Random(seed), {l: tiny_model(l, seed=1) for l in LAYOUTS[kind]}
    ran, refused, failures = 0, 0, []
    for it in range(runs):
        draw = [] # what this run drew, for the report
        try: globals()[kind](rng, models, it, draw); ran += 1
        except Exception as e: # drawn parameters may be refused; the examples only as documented
            if any(x in str(e) for x in EXPECTED) or (kind in ('params', 'stratigraphic')
                                                      and isinstance(e, (ValueError, TypeError))): refused += 1
            else:
                failures.append(f'run {it} ({"; ".join(draw)}): {type(e).__name__}: {str(e)[:300]}')
                print('FAILED', failures[-1], flush=True)
                if len(failures) <= 3: traceback.print_exc()
    return ran, refused, failures

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) != 4 or sys.argv[1] not in LAYOUTS: sys.exit(__doc__)
    ran, refused, failures = search(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    print(f'{sys.argv[1]}, seed {sys.argv[2]}: {ran} ran, {refused} refused, {len(failures)} failed')
