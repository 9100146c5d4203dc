"""What the streaming heads' fold costs a decode step, at two commits, in turns: cProfile in fresh processes.

Each arm is LABEL=DIR=STRATEGY, DIR a clean worktree of the commit to measure (`arms.run_in`). A process (1 thread)
loads SmolLM2-135M and, as `decode_profile.py` does, prefills the first LENGTH tokens of WikiText-2
(`KVSTRAT_WIKITEXT`; Austen where it is not found, as `arms.saved_tokens`) in chunks of 512 and profiles 32 greedy
decode steps. It prints the time per step spent in `StreamingState.fold_due` (`absorb` inside it) and its share of the
whole step, both under the profiler: the share is the figure to compare, since it does not move with the machine's
speed. Then each arm's medians:
    python research/fold_cost.py 3 2048 before=/work/wt-a=hybrid after=/work/wt-b=hybrid
"""
import json, os, statistics, sys
from arms import parse_arms, run_in, saved_tokens

DECODE = 32
CHILD = """import json, pstats, sys, torch
sys.path.append(sys.argv[4]) # this checkout's scripts: `decode_profile`'s run, on the arm's kvstrat (imported first)
from decode_profile import ms_per_step
from kvstrat.core import load_model
ids, strategy, decode = torch.load(sys.argv[1])[None], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(1)
model, _ = load_model('smollm2-135m')
stats = pstats.Stats(ms_per_step(model, ids, strategy, decode, profile=True)[1])
in_ = lambda name: sum(ct for (path, _, fn), (_, _, _, ct, _) in stats.stats.items()
                       if fn == name and path.endswith('streaming.py'))
print(json.dumps(dict(fold_ms=1000 * in_('fold_due') / decode, absorb_ms=1000 * in_('absorb') / decode,
                      step_ms=1000 * stats.total_tt / decode, kvstrat=kvstrat.__file__)))"""

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    rounds, length, arms = parse_arms(sys.argv[1:], __doc__)
    shares, ids_file = {label: [] for label, _, _ in arms}, saved_tokens(length)
    scripts = os.path.dirname(os.path.abspath(__file__))
    for i in range(rounds):
        for label, path, strategy in arms:
            r = run_in(path, CHILD, ids_file, strategy, str(DECODE), scripts)
            shares[label].append(r['fold_ms'] / r['step_ms'])
            print(json.dumps(dict(round=i, arm=label, strategy=strategy, **{k: r[k] for k in
                                  ('fold_ms', 'absorb_ms', 'step_ms')})), flush=True)
    for label, s in shares.items(): print(label, f'fold share {statistics.median(s):.3f}', [round(x, 3) for x in s])
