"""A long prompt in one forward pass, as `generate` feeds it: seconds, peak process memory and the logits, per strategy
and commit, each in a fresh process, arms in turns.

Each arm is LABEL=DIR=STRATEGY, DIR a clean worktree of the commit to measure, whose kvstrat the process imports
(`arms.run_in`). A process loads SmolLM2-135M, feeds LENGTH tokens of WikiText-2 (the first, where it is found) in
one chunk, then decodes 8 greedy tokens. It prints the prefill's seconds and the process's peak RSS (MB; the loaded
model's in brackets); every arm's logits after the prefill and at each decoded token are compared with the first arm
of the same strategy (max |Δlogit|, and whether the greedy tokens and the cache's bytes agree):
    python research/long_prefill.py 2 4096 full=/work/wt-a=full old=/work/wt-a=h2o new=/work/wt-b=h2o
"""
import json, os, statistics, sys, tempfile
import torch
from arms import parse_arms, run_in

CHILD = '''
import json, resource, sys, time, torch, warnings
warnings.filterwarnings('ignore')
from kvstrat.cache import CompressedCache
from kvstrat.policy import make_strategy
from kvstrat.core import load_model, load_text, tokenize
torch.set_num_threads(2)
length, strategy, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
model, tok = load_model('smollm2-135m')
ids = tokenize(tok, load_text('auto')[0])[:length][None]
loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
cache = CompressedCache(model, make_strategy(strategy))
with cache.attached(model), torch.inference_mode():
    t = time.perf_counter()
    logits = [model(ids, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]]
    seconds = time.perf_counter() - t
    for _ in range(8): logits.append(model(logits[-1].argmax()[None, None], cache=cache, use_cache=True).logits[0, -1])
torch.save(dict(seconds=seconds, peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, loaded=loaded,
                logits=torch.stack(logits), nbytes=cache.nbytes()), out)
print(json.dumps(dict(kvstrat=kvstrat.__file__)))
'''

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    rounds, length, arms = parse_arms(sys.argv[1:], __doc__)
    runs, tmp = {label: [] for label, _, _ in arms}, tempfile.mkdtemp()
    for i in range(rounds):
        for label, path, strategy in arms:
            out = os.path.join(tmp, f'{label}-{i}.pt')
            run_in(path, CHILD, str(length), strategy, out)
            runs[label].append(torch.load(out))
            r = runs[label][-1]
            print(f"{i} {label} ({strategy}): {r['seconds']:.1f} s, peak {r['peak']:.0f} MB ({r['loaded']:.0f})",
                  flush=True)
    first = {}
    for label, path, strategy in arms:
        r, ref = runs[label], runs[first.setdefault(strategy, label)]
        diff = max(float((x['logits'] - y['logits']).abs().max()) for x, y in zip(r, ref))
        same = all(torch.equal(x['logits'].argmax(-1), y['logits'].argmax(-1)) and x['nbytes'] == y['nbytes']
                   for x, y in zip(r, ref))
        print(json.dumps(dict(arm=label, strategy=strategy, seconds=statistics.median(x['seconds'] for x in r),
                              peak_mb=statistics.median(x['peak'] for x in r), against=first[strategy],
                              max_dlogit=diff, same_tokens_and_bytes=same)))
