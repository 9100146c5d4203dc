"""Profile one passkey trial on the CPU: wall, user and system seconds, page faults, and cProfile's top functions.

    KVSTRAT_WIKITEXT=.../wiki.test.raw python research/profile_passkey.py h2o 2048            # as the bench runs it
    KVSTRAT_WIKITEXT=.../wiki.test.raw python research/profile_passkey.py h2o 2048 --no-reuse # the default allocator

The trial is the bench's (`kvstrat.bench.passkey_trial`), on the prompt the bench builds for that length and depth;
one untimed trial runs first, so that one-time costs are not counted.
"""
import argparse, cProfile, pstats, resource, time
import torch
from kvstrat.bench import load_strategies, passkey_cases, passkey_trial, release_freed_memory, reuse_freed_memory
from kvstrat.core import load_model, load_text, tokenize

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument('strategy', help="a strategy, e.g. h2o or kivi:bits=2")
p.add_argument('length', type=int, help='prompt tokens, e.g. 2048')
p.add_argument('--depth', type=float, default=0.5, help='needle depth (default %(default)s)')
p.add_argument('--threads', type=int, default=1, help='torch threads (default %(default)s)')
p.add_argument('--model', default='smollm2-135m')
p.add_argument('--no-reuse', action='store_true', help="keep glibc's default: large freed blocks go back to the kernel")
p.add_argument('--top', type=int, default=25, help='functions listed (default %(default)s)')
o = p.parse_args()

torch.set_num_threads(o.threads)
if not o.no_reuse: reuse_freed_memory()
load_strategies()
model, tok = load_model(o.model, 'cpu')
case = passkey_cases(tok, tokenize(tok, load_text('auto')[0]), [o.length], [o.depth], 1)[0]
passkey_trial(model, tok, case, o.strategy)
release_freed_memory()

prof, r0, t0 = cProfile.Profile(), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
answer, cache = prof.runcall(passkey_trial, model, tok, case, o.strategy)
wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
print(f'{o.strategy} at {o.length} tokens, {o.threads} thread(s), freed memory {"returned" if o.no_reuse else "reused"}: '
      f'wall {wall:.1f} s, user {r1.ru_utime - r0.ru_utime:.1f} s, system {r1.ru_stime - r0.ru_stime:.1f} s, '
      f'{r1.ru_minflt - r0.ru_minflt} page faults; answer {answer!r} (key {case.key}), {cache.nbytes()} bytes held')
pstats.Stats(prof).sort_stats('tottime').print_stats(o.top)
