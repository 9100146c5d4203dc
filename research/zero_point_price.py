"""What 8-bit zero-points would buy Stratigraphic, as the knapsack prices it: no evaluation text is read.

Today each quantised group stores an 8-bit log scale and an fp16 zero-point. Per row that is, for keys, 3 bytes per
channel over a key group of 32 rows (6 B of a 2-bit key row's 22) and, for values, 3 bytes (of 19). This prices a
format whose zero-points take one byte, with the same calibrated costs: an upper bound on what the bytes alone buy, as
a zero-point of 8 bits would round; `--error K V` prices that too, every key cost times K and value cost times V
(`zero_point_error.py` measures the squared error), and `--calibrations TODAY ZERO8` takes the costs of both from
calibrations measured side by side (`zero_point_calibrate.py`). For each ratio: the share of the plan's bytes held in
zero-points, and the summed calibrated cost (nats per token) of today's plan and of the plan with the bytes saved.
    python research/zero_point_price.py --ratios 4.2 6.4 8.4 [--error 1.06 1.02 | --calibrations TODAY ZERO8]  # seconds
"""
import argparse, dataclasses, json
import torch
from kvstrat.adapter import ModelSpec
from kvstrat.core import load_model
from kvstrat.stratigraphic import Stratigraphic

def zero_point_bytes(s:Stratigraphic, head_dim:int) -> torch.Tensor: # (k,) per choice, like `head_choices`' columns
    "Bytes of fp16 zero-points a head holds at `length` under each choice: 2 per key group channel, 2 per value row."
    held, _ = s.top_held(head_dim)
    per_row = 2 * head_dim / s.group + 2 # the keys' share of their group's zero-points, and the value row's own
    pairs = len(s.bit_widths()) ** 2
    quantised = [s.length - held] * pairs + [0] + ([s.window_rows()] * pairs if s.windowed_choices else [])
    return per_row * torch.tensor(quantised, dtype=torch.float)

def plan_cost(s:Stratigraphic, cost:torch.Tensor, nbytes:torch.Tensor, spec) -> tuple[float, torch.Tensor]:
    choice = s.choose(cost, nbytes, len(cost) * s.fp16_bytes(spec.head_dim) / s.ratio, spec.n_layers)
    return cost.gather(1, choice[:, None]).sum().item(), choice

if __name__ == '__main__':
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--ratios', nargs='+', type=float, required=True)
    how = p.add_mutually_exclusive_group()
    how.add_argument('--error', nargs=2, type=float, default=(1., 1.), metavar=('K', 'V'))
    how.add_argument('--calibrations', nargs=2, metavar=('TODAY', 'ZERO8'))
    o = p.parse_args()
    model, _ = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    for ratio in o.ratios:
        s = Stratigraphic(ratio=ratio, calibration=o.calibrations[0] if o.calibrations else 'auto')
        sens = s.sensitivity(spec)
        cost, nbytes = s.head_choices(sens, spec.head_dim) # (L·H, k) each
        zeros = zero_point_bytes(s, spec.head_dim).expand_as(nbytes)
        today, choice = plan_cost(s, cost, nbytes, spec)
        if o.calibrations: s8 = dataclasses.replace(s, calibration=o.calibrations[1]); sens8 = s8.sensitivity(spec)
        else: sens8 = dataclasses.replace(sens, cost=sens.cost * torch.tensor(o.error)[:, None]) # (L, H, 2, widths)
        cost_8bit, _ = s.head_choices(sens8, spec.head_dim)
        cheaper, _ = plan_cost(s, cost_8bit, nbytes - zeros / 2, spec) # one byte of each two
        share = zeros.gather(1, choice[:, None]).sum().item() / nbytes.gather(1, choice[:, None]).sum().item()
        print(json.dumps(dict(ratio=ratio, zero_point_share=round(share, 4), cost=round(today, 5),
                              cost_8bit_zero_points=round(cheaper, 5), change=round(cheaper / today - 1, 4))),
              flush=True)
