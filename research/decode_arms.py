"""Paired decode speed of strategies at two commits, in turns: the bench's timed run, in fresh processes.

Each arm is LABEL=DIR=STRATEGY, DIR a clean worktree of the commit to measure (`arms.run_in`). A process sets up the
allocator as the bench's timed runs do (`reuse_freed_memory`), loads SmolLM2-135M and runs the bench's `speed_once`
on the first LENGTH tokens of WikiText-2 (prefill in chunks of `SPEED_CHUNK`, then 32 greedy tokens), then FullKV's
on the same tokens, as the bench pairs them. The arms take turns, round after round. Prints each process's decode
tokens/s and its ratio to the FullKV run beside it, then each arm's median ratio:
    python research/decode_arms.py 3 8192 before=/work/wt-a=hybrid after=/work/wt-b=hybrid
"""
import json, statistics, sys
from arms import parse_arms, run_in, saved_tokens

THREADS, DECODE = 2, 32 # as the bench's speed runs
CHILD = """import json, sys, torch
from kvstrat import bench
from kvstrat.core import load_model
ids, threads, strategy, decode = torch.load(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
bench.reuse_freed_memory(); torch.set_num_threads(threads)
model, _ = load_model('smollm2-135m')
tok_s = [bench.speed_once(model, ids, s, decode)['decode_tok_s'] for s in (strategy, 'full')]
print(json.dumps(dict(decode_tok_s=tok_s[0], full_decode_tok_s=tok_s[1], kvstrat=kvstrat.__file__)))"""

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    rounds, length, arms = parse_arms(sys.argv[1:], __doc__)
    ratios, ids_file = {label: [] for label, _, _ in arms}, saved_tokens(length)
    for i in range(rounds):
        for label, path, strategy in arms:
            r = run_in(path, CHILD, ids_file, str(THREADS), strategy, str(DECODE))
            ratios[label].append(r['decode_tok_s'] / r['full_decode_tok_s'])
            print(json.dumps(dict(round=i, arm=label, strategy=strategy, decode_tok_s=r['decode_tok_s'],
                                  full_decode_tok_s=r['full_decode_tok_s'])), flush=True)
    for label, r in ratios.items(): print(label, f'{statistics.median(r):.2f}', [round(x, 2) for x in r])
