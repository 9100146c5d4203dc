"""Peak process memory of strategies at two commits, in turns: fresh processes, the bench's own measure.

Each arm is LABEL=DIR=STRATEGY, DIR a clean worktree of the commit to measure; each fresh process imports kvstrat
from that worktree, and says so (`arms.run_in`), so the arms can differ in code. The arms take turns, round after
round, so that whatever else the machine does falls on all of them alike. Prints each round, then each arm's median
and its processes (MB); with OUT=FILE.json first, also writes every process's peak there, with the length, the arms
and the command (`nbs/results/peaks/` holds such files), and the glibc allocator settings (`MALLOC_*`,
`GLIBC_TUNABLES`) the fresh processes inherited:
    python research/peak_arms.py 8 1024 full=/work/wt-a=full before=/work/wt-a=hybrid after=/work/wt-b=hybrid
    python research/peak_arms.py OUT=peaks.json 8 1024 full=/work/wt-a=full hybrid=/work/wt-a=hybrid

A STRATEGY ending in `+trim` runs with the trim a compressed layer does (`cache.release_before_chunk`: glibc's freed
memory handed back before each chunk of at least `RELEASE_MIN_QUERIES` queries) before every decoder layer's chunks,
by hooks registered for the run and removed after it: FullKV's layers are transformers' own, and do not trim. Such
every arm needs a tree with the public `bench.one_run_peak_mb` and `bench.loaded_run_peak_mb` (2026-12-07 on;
before, they were private) and, for `+trim`, `cache.release_before_chunk` (2026-12-06 on).
    python research/peak_arms.py 8 1024 full=/work/wt-a=full full-trimmed=/work/wt-a=full+trim hybrid=/work/wt-a=hybrid
"""
import json, os, statistics, sys
from arms import parse_arms, run_in, saved_tokens

THREADS, DECODE = 2, 32 # each fresh process's torch threads and decoded tokens, as the bench's speed runs
# the work of the bench's `fresh_peak_mb`, in a process started in the arm's tree
CHILD = """import json, sys, torch
from kvstrat import bench
ids, threads, strategy, decode = torch.load(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
strategy, plus, _ = strategy.partition('+trim')
if not plus: peak = bench.one_run_peak_mb('smollm2-135m', None, threads, ids, strategy, decode)
else: # `one_run_peak_mb`, with the trim hooked in front of each decoder layer
    from kvstrat.cache import release_before_chunk
    torch.set_num_threads(threads)
    model, _ = bench.load_bench_model('smollm2-135m', None)
    def release(layer, args, kwargs):
        hidden = args[0] if args else kwargs['hidden_states'] # (B, q, hidden size)
        release_before_chunk(hidden.shape[1], hidden.device)
    hooks = [layer.register_forward_pre_hook(release, with_kwargs=True) for layer in model.model.layers]
    try: peak = bench.loaded_run_peak_mb(model, ids, strategy, decode)
    finally:
        for h in hooks: h.remove()
print(json.dumps(dict(peak=peak, kvstrat=kvstrat.__file__)))"""

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    argv = sys.argv[1:]
    out = argv.pop(0).removeprefix('OUT=') if argv and argv[0].startswith('OUT=') else None
    rounds, length, arms = parse_arms(argv, __doc__, '[OUT=FILE.json] ROUNDS LENGTH LABEL=DIR=STRATEGY[+trim]...')
    if bad := [s for _, _, s in arms if '+' in s and not s.endswith('+trim')]:
        sys.exit(f'unknown suffix in {", ".join(bad)}: only +trim is known')
    runs, ids_file = {label: [] for label, _, _ in arms}, saved_tokens(length)
    for i in range(rounds):
        for label, path, strategy in arms:
            runs[label].append(run_in(path, CHILD, ids_file, str(THREADS), strategy, str(DECODE))['peak'])
        print(i, {k: round(v[-1]) for k, v in runs.items()}, flush=True)
    for label, r in runs.items(): print(label, round(statistics.median(r)), [round(x) for x in r])
    if out:
        with open(out, 'w') as f:
            json.dump(dict(what=f'peak RSS (MB) of one fresh-process speed_once run each (the work of fresh_peak_mb, '
                                f'{THREADS} threads, {DECODE} decoded tokens), arms taking turns round after round; '
                                'the first tokens of WikiText-2 as the bench takes them; "+trim": with malloc_trim '
                                'before each decoder layer\'s chunks of at least RELEASE_MIN_QUERIES queries',
                           length=length, arms=arms,
                           command='python research/peak_arms.py ' + ' '.join(sys.argv[1:]),
                           allocator_env={k: v for k, v in os.environ.items()
                                          if k.startswith(('MALLOC_', 'GLIBC_TUNABLES'))},
                           runs=runs), f, indent=1)
