"""Where a Stratigraphic plan's loss comes from on calibration text: its keys alone, its values alone, both, against
what the single-tensor costs the knapsack adds predict, with or without the fp16 rows the cache holds.

On WikiText-2's evaluation windows (`strat-parts-*`) the 4× plan's keys alone cost twice its values alone, where the
single costs predict them level. This script asks the same of calibration windows only (per text, `--windows` of
`--length` tokens outside every evaluation window, every other one with a passage to copy; KL over the last half,
teacher-forced). `--residual 12` reads each query's 12 newest tokens and the rest of their key group at fp16, as
the cache holds them (`held_exact`); without it every token but the sinks is quantised, as the shipped calibration
measured each tensor alone.
    python research/keys_values.py 4 [--windows 4] [--length 320] [--residual 12] [--calibration FILE]  # ~2 min each
"""
import sys, json
import torch
import torch.nn.functional as F
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.sensitivity import FORMAT_BITS, requantized, held_exact, mixed_attention, kl_from_exact
from kvstrat.measure import calibration_set
from kvstrat.linear_attention import attention_override, causal_attention
from kvstrat.policy import make_strategy

SINKS, KINDS = 4, ('keys', 'values')

@torch.no_grad()
def main(ratio:float, windows_per_text:int=4, length:int=320, residual:int|None=None, calibration:str='auto'):
    model, tok = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    L, H, D = spec.n_layers, spec.n_kv_heads, spec.head_dim
    windows, scored = calibration_set(tok, ['wikitext2', 'austen'], windows_per_text, length, 128), length // 2
    exact = F.log_softmax(model(windows, use_cache=False, logits_to_keep=scored).logits.float(), -1)
    strategy = make_strategy(f'stratigraphic:ratio={ratio},window=none,rotate=false,calibration={calibration}')
    plan, sens = strategy.prepare(spec), strategy.sensitivity(spec)
    held = None if residual is None else held_exact(length, SINKS, residual, strategy.group)
    width = torch.tensor([[[FORMAT_BITS.index(int(b)) for b in head] for head in layer] for layer in plan.widths])
    def joint(kinds): # KL with the plan's widths on `kinds` (0: keys, 1: values), the other kind exact
        def attend(i, q, k, v, s):
            kv = [k.clone(), v.clone()]
            for h in range(H):
                for j in kinds:
                    b = FORMAT_BITS[int(width[i, h, j])]
                    kv[j][:, h] = requantized(kv[j][:, h], strategy.family.spec(b, b, D), j == 0, SINKS)
            return causal_attention(q, *kv, s) if held is None else mixed_attention(q, k, v, *kv, s, held)
        with attention_override(model, attend):
            return kl_from_exact(exact, model(windows, use_cache=False, logits_to_keep=scored).logits).item()
    predicted = [sens.cost[..., j, :].gather(-1, width[..., j, None]).sum().item() for j in (0, 1)]
    measured = [joint([0]), joint([1])]
    factor = [m / p for m, p in zip(measured, predicted)]
    both = joint([0, 1])
    print(json.dumps(dict(ratio=ratio, calibration=calibration, windows=len(windows), length=length, residual=residual,
                          joint_kl_both=round(both, 5), predicted_both=round(sum(predicted), 5),
                          **{f'{k}_{what}': round(x[j], 5) for j, k in enumerate(KINDS)
                             for what, x in (('joint_kl', measured), ('predicted', predicted), ('factor', factor))})))

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(2)
    opt = lambda name, typ: typ(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else None
    main(float(sys.argv[1]), opt('--windows', int) or 4, opt('--length', int) or 320, opt('--residual', int),
         opt('--calibration', str) or 'auto')
