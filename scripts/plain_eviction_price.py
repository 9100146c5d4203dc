"""What leaving plain eviction out of Stratigraphic's choices would cost, as the knapsack prices it: no evaluation text.

    python scripts/plain_eviction_price.py --ratios 3 4 5 6 6.45 8 --strategies stratigraphic stratigraphic:top_bits=8

A head may evict with its window in tier 0 (exactly `window` tokens kept) or, with `quantised_window`, with the
window past the residual at a width pair (64 to 126 tokens kept, in whole key groups). For each ratio and setting,
the plan's summed calibrated cost and how many heads take each, then the same knapsack with plain eviction priced
out. Seconds.
"""
import argparse, json
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.policy import make_strategy
from kvstrat.sensitivity import knapsack

def main(ratios:list[float], strategies:list[str]):
    model, _ = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    for ratio in ratios:
        for label in strategies:
            s = make_strategy(f"{label}{',' if ':' in label else ':'}ratio={ratio}")
            cost, nbytes = s.head_choices(s.sensitivity(spec), spec.head_dim) # (L·H_kv, choices)
            plain = len(s.bit_widths()) ** 2 # the column of evicting with the window in tier 0
            budget = len(cost) * s.length * 4 * spec.head_dim / ratio
            for left_out in (False, True):
                c = cost.clone()
                if left_out: c[:, plain] = float('inf')
                choice = knapsack(c, nbytes, budget)
                print(json.dumps(dict(ratio=ratio, strategy=label, plain_eviction=not left_out,
                                      cost=round(cost.gather(1, choice[:, None]).sum().item(), 5),
                                      evicting=int((choice == plain).sum()), windowed=int((choice > plain).sum()))),
                      flush=True)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--ratios', nargs='+', type=float, required=True)
    p.add_argument('--strategies', nargs='+', required=True)
    o = p.parse_args()
    main(o.ratios, o.strategies)
