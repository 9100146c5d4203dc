"""ms per decode step of each strategy after a 2,048-token prefill, in one process; optionally a cProfile of one.

    python research/decode_profile.py "full int8 kivi" [CONTEXT] [STRATEGY_TO_PROFILE]
"""
import cProfile, pstats, sys, time
import torch
from kvstrat.cache import CompressedCache
from kvstrat.policy import make_strategy
from kvstrat.core import load_model, load_text, tokenize

def ms_per_step(model, ids, strategy, decode=16, profile=False) -> tuple[float, cProfile.Profile|None]:
    "ms per decode step after a prefill of `ids` (1, L) in chunks of 512; with `profile`, the decode steps' profile."
    cache = CompressedCache(model, make_strategy(strategy))
    with cache.attached(model), torch.inference_mode(): # as `bench.speed_once`
        for i in range(0, ids.shape[1], 512):
            logits = model(ids[:, i:i + 512], cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        prof = cProfile.Profile() if profile else None
        if prof: prof.enable()
        t = time.perf_counter()
        for _ in range(decode): logits = model(logits.argmax(-1, keepdim=True), cache=cache, use_cache=True).logits[:, -1]
        dt = (time.perf_counter() - t) / decode
    if prof: prof.disable()
    return 1000 * dt, prof

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(1)
    model, tok = load_model('smollm2-135m')
    ids = tokenize(tok, load_text('wikitext2')[0])[:int(sys.argv[2]) if len(sys.argv) > 2 else 2048][None]
    for s in sys.argv[1].split(): print(f'{s}: {ms_per_step(model, ids, s)[0]:.1f} ms/step', flush=True)
    if len(sys.argv) > 3:
        pstats.Stats(ms_per_step(model, ids, sys.argv[3], profile=True)[1]).sort_stats('tottime').print_stats(25)
