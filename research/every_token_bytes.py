"""Compression at every context (`every_token_compression`) against protocol P's points, per strategy.

Protocol P measures compression after its prefill and after each chunk of 16 scored tokens. A cache that keeps its
newest rows unsunk until a whole key group of 32 can sink holds, at those points, either none waiting or 16, never the
counts in between. This feeds one token at a time from the prefill to the window's end and appends one JSON row per
strategy to OUT. The ids are random: for most strategies the bytes held at a context follow from the token counts
alone; where they follow the text (`adaptive`), the mean at protocol P's points misses the committed figure. Each row:
protocol P's figure as committed, the mean at protocol P's points, the mean over every context, and the rows tier 0
holds per head at each (tiered caches). Each source is a run directory (its ppl rows, at their prefill and length) or
a strategy, measured as protocol P's 1k windows hold it (or at --prefill and --score). A run's rows replay each
strategy as it ran (`ran_strategy`: a parameter added since takes the value it had before, not today's default). A
strategy already in OUT is skipped:
    python research/every_token_bytes.py OUT.jsonl nbs/results/bench/headline-1204 stratigraphic:ratio=4.2
    python research/every_token_bytes.py OUT.jsonl --prefill 3584 stratigraphic:length=4096,ratio=6.05
"""
import argparse, json, statistics, torch
from pathlib import Path
from kvstrat.core import load_model
from kvstrat.docs import read_rows
from kvstrat.policy import make_strategy
from kvstrat.protocol import every_token_compression
from kvstrat.results import ran_strategy

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument('out', type=Path)
p.add_argument('sources', nargs='+', help='run directories or strategies')
p.add_argument('--prefill', type=int, default=512, help="a named strategy's prefill (default %(default)s)")
p.add_argument('--score', type=int, default=512, help="a named strategy's scored tokens (default %(default)s)")
args = p.parse_args()
torch.set_num_threads(2)
m, _ = load_model('smollm2-135m')
rows = {} # strategy -> its first ppl row (a run holds one per text; the bytes are the same)
for src in args.sources:
    if not Path(src).is_dir(): # a strategy: protocol P's windows at --prefill and --score
        settings = dict(prefill=args.prefill, score=args.score, chunk=16)
        rows[src] = dict(strategy=src, compression=None, settings=settings)
    for r in read_rows(src) if Path(src).is_dir() else []:
        if r['protocol'] == 'ppl' and r['strategy'] != 'full': rows.setdefault(r['strategy'], r)
done = {json.loads(l)['strategy'] for l in args.out.read_text().splitlines()} if args.out.exists() else set()
for r in rows.values():
    if r['strategy'] in done: continue
    strategy = ran_strategy(r) if 'params' in r else make_strategy(r['strategy'])
    prefill, chunk = r['settings']['prefill'], r['settings']['chunk']
    end = prefill + r['settings']['score']
    ids = torch.randint(100, 20000, (end,), generator=torch.Generator().manual_seed(0))
    top = [] # rows tier 0 holds per head, over the layers, at each context
    def tier0(n, cache):
        stores = [layer.store for layer in cache.layers if layer.store is not None]
        top.append(statistics.mean(s.tiers[0].counts.float().mean().item() for s in stores) if stores else None)
    every = every_token_compression(m, ids, strategy, prefill, on_context=tier0).tolist()
    points = [i for i in range(len(every)) if i % chunk == 0 or i == len(every) - 1] # after the prefill, each chunk
    mean = lambda xs, idx: None if xs[0] is None else statistics.mean(xs[i] for i in idx)
    row = dict(strategy=r['strategy'], prefill=prefill, end=end, chunk=chunk, committed=r['compression'],
               protocol_points=mean(every, points), every_token=statistics.mean(every),
               tier0_rows_points=mean(top, points), tier0_rows_every_token=mean(top, range(len(top))))
    with args.out.open('a') as f: f.write(json.dumps(row) + '\n')
    print(f"{r['strategy'][:60]:60} committed {row['committed'] or float('nan'):.3f}x, its points "
          f"{row['protocol_points']:.3f}x, every token {row['every_token']:.3f}x", flush=True)
