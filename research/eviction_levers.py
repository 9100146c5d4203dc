"""What a Stratigraphic setting's plan costs as the knapsack prices it, at several ratios: no evaluation text is read.

For each ratio and each setting, the summed calibrated cost of the plan (KL in nats per token, what the knapsack
minimises), how many heads evict with their window at fp16 and how many with it quantised, and the compression
planned at `length`. Run before measuring a new choice, to say what it should buy (the diary's rules are fixed on it).
    python research/eviction_levers.py --ratios 4.1 6.45 9.35 --strategies stratigraphic \
        stratigraphic:quantised_window=false stratigraphic:window=32,calibration=FILE        # seconds
"""
import argparse, json
import torch
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.policy import make_strategy

def main(ratios:list[float], strategies:list[str]):
    model, _ = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    for ratio in ratios:
        for label in strategies:
            strategy = make_strategy(f"{label}{',' if ':' in label else ':'}ratio={ratio}")
            plan, (cost, _) = strategy.prepare(spec), strategy.head_choices(strategy.sensitivity(spec), spec.head_dim)
            tiers, pairs = strategy.choice_tiers(), len(strategy.bit_widths()) ** 2 # pairs, evicting, windows
            windowed = [False] * len(cost) if plan.windowed is None else plan.windowed.flatten().tolist()
            first = lambda tier: int((tiers[:pairs + 1] == tier).nonzero()[0]) # a pair, or evicting
            index = torch.tensor([pairs + 1 + first(t) if w else first(t) # a window's pair: `pairs + 1` further on
                                  for t, w in zip(plan.tier.flatten().tolist(), windowed)])
            print(json.dumps(dict(ratio=ratio, strategy=label, planned=round(plan.planned, 3),
                                  cost=round(cost.gather(1, index[:, None]).sum().item(), 5),
                                  evicting=int((plan.widths[..., 0] == 0).sum()), windowed=sum(windowed))),
                  flush=True)

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--ratios', nargs='+', type=float, required=True)
    p.add_argument('--strategies', nargs='+', required=True)
    o = p.parse_args()
    main(o.ratios, o.strategies)
