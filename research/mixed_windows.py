"""What a plan would cost if each evicting head could choose a 64- or a 128-token window: no evaluation text is read.

The two shipped calibrations measured eviction beyond 64 and beyond 128 tokens on the same windows. This prices
one knapsack over each head's width pairs (from the 128-token plan), evicting with either window, and either window
quantised at a pair, at the byte budget of each ratio, and prints the summed calibrated cost (nats per token) next to
each window alone, with how many heads take the 64-token window:
    python research/mixed_windows.py 6.0 6.4 8.4      # seconds
"""
import json, sys, warnings
import torch
from kvstrat.adapter import ModelSpec
from kvstrat.core import load_model
from kvstrat.stratigraphic import Stratigraphic, knapsack

def price(cost, nbytes, budget) -> tuple[float, torch.Tensor]:
    choice = knapsack(cost, nbytes, budget)
    return cost.gather(1, choice[:, None]).sum().item(), choice

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 2: sys.exit(__doc__)
    warnings.filterwarnings('ignore', 'stratigraphic: calibration') # the 64-token file at ratio 8 up: 12 residual rows
    model, _ = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    for ratio in map(float, sys.argv[1:]):
        short, long = Stratigraphic(ratio=ratio, window=64), Stratigraphic(ratio=ratio, window=128)
        (cs, ns), (cl, nl) = (s.head_choices(s.sensitivity(spec), spec.head_dim) for s in (short, long))
        pairs = len(long.bit_widths()) ** 2 # the first `pairs` choices keep every token; the rest evict
        budget = len(cl) * long.fp16_bytes(spec.head_dim) / ratio
        mixed, choice = price(torch.cat([cl, cs[:, pairs:]], 1), torch.cat([nl, ns[:, pairs:]], 1), budget)
        print(json.dumps(dict(ratio=ratio, window64=round(price(cs, ns, budget)[0], 5),
                              window128=round(price(cl, nl, budget)[0], 5), mixed=round(mixed, 5),
                              heads_at_64=int((choice >= cl.shape[1]).sum()))), flush=True)
