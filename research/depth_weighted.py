"""Does weighting each layer's costs by its depth give the knapsack a plan with less joint KL? Chosen on calibration
text only.

With every tensor quantised, single-tensor costs add within a layer but not across layers (+21 %,
`research/joint_costs.py`). This script scales each layer's width and eviction costs by `1 + a·(L - 1 - l)/(L - 1)`
(a > 0: lower layers dearer; a < 0: upper layers dearer), plans at the ratio with each `a`, and measures each plan's
joint KL on 4 calibration windows per text (the shipped 2 and 2 more; nothing from any evaluation
window). Every plan holds the same bytes (the ratio is planned), so the lowest KL is the better plan on this text. The
KL is teacher-forced: every token but the sinks at the plan's widths, no fp16 window.
    python research/depth_weighted.py 4 OUT_DIR      # ~4 minutes on 2 CPU cores; writes OUT_DIR/depth-a*.json
"""
import sys, json
from dataclasses import replace
from pathlib import Path
import torch
import torch.nn.functional as F
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.sensitivity import FORMAT_BITS, requantized, kl_from_exact
from kvstrat.measure import calibration_set
from kvstrat.linear_attention import attention_override, causal_attention
from kvstrat.policy import make_strategy

SCORED, SINKS, SLOPES = 160, 4, (-0.5, -0.25, 0.0, 0.5, 1.0, 2.0)

@torch.no_grad()
def main(ratio:float, out:Path, windows_per_text:int=4):
    model, tok = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    L, H, D = spec.n_layers, spec.n_kv_heads, spec.head_dim
    windows = calibration_set(tok, ['wikitext2', 'austen'], windows_per_text, 320, 128)
    exact = F.log_softmax(model(windows, use_cache=False, logits_to_keep=SCORED).logits.float(), -1)
    shipped = make_strategy('stratigraphic:rotate=false').sensitivity(spec)
    out.mkdir(parents=True, exist_ok=True)
    for a in SLOPES:
        weight = 1 + a * torch.arange(L - 1, -1, -1) / (L - 1) # (L,)
        sens = replace(shipped, cost=shipped.cost * weight[:, None, None, None],
                       evict=None if shipped.evict is None else shipped.evict * weight[:, None],
                       source=f'{shipped.source}; each layer l scaled by 1 + {a}·(L - 1 - l)/(L - 1)')
        path = out/f'depth-a{a:+.2f}.json'; sens.save(path)
        strategy = make_strategy(f'stratigraphic:ratio={ratio},window=none,rotate=false,calibration={path}')
        plan = strategy.prepare(spec)
        def attend(i, q, k, v, s):
            k, v = k.clone(), v.clone()
            for h in range(H):
                for kv, x in enumerate((k, v)):
                    b = int(plan.widths[i, h, kv])
                    x[:, h] = requantized(x[:, h], strategy.family.spec(b, b, D), kv == 0, SINKS)
            return causal_attention(q, k, v, s)
        with attention_override(model, attend):
            kl = kl_from_exact(exact, model(windows, use_cache=False, logits_to_keep=SCORED).logits).item()
        hist = torch.bincount(plan.widths.flatten(), minlength=9)[list(FORMAT_BITS)].tolist()
        low = plan.widths[:L // 2].float().mean().item(); high = plan.widths[L // 2:].float().mean().item()
        print(json.dumps(dict(slope=a, ratio=ratio, planned=round(plan.planned, 4), joint_kl=round(kl, 5),
                              tensors_at_8_4_3_2=hist, mean_bits_lower_half=round(low, 3),
                              mean_bits_upper_half=round(high, 3))), flush=True)

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(2)
    main(float(sys.argv[1]), Path(sys.argv[2]))
