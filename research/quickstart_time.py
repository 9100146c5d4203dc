"""The README quickstart's wall time per strategy: build the cache, attach it and generate 40 greedy tokens from the
quickstart's prompt. One warm-up each, then 5 rounds with the strategies in turns; prints each one's medians and its
total against the first strategy's:
    python research/quickstart_time.py full int8 kivi stratigraphic:ratio=4 hybrid
"""
import statistics, sys, time, torch
from kvstrat.stratigraphic import *

ROUNDS, NEW_TOKENS = 5, 40

def once(model, ids, name:str) -> tuple[float, float]:
    "Seconds to build the cache, and for the whole quickstart."
    t0 = time.perf_counter()
    cache = CompressedCache(model, make_strategy(name))
    t1 = time.perf_counter()
    with cache.attached(model):
        model.generate(ids, cache=cache, max_new_tokens=NEW_TOKENS, do_sample=False)
    return t1 - t0, time.perf_counter() - t0

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    names = sys.argv[1:]
    if not names: sys.exit(__doc__)
    torch.set_num_threads(2)
    model, tok = load_model('smollm2-135m')
    ids = tok('The history of the KV cache', return_tensors='pt').input_ids
    for name in names: once(model, ids, name)
    runs = {name: [] for name in names}
    for _ in range(ROUNDS):
        for name in names: runs[name].append(once(model, ids, name))
    total = {name: statistics.median(t for _, t in r) for name, r in runs.items()}
    for name, r in runs.items():
        print(f"{name:28} build {statistics.median(b for b, _ in r):.3f} s, total {total[name]:.3f} s "
              f"({total[name] / total[names[0]]:.2f}x)")
