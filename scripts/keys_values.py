"""Are keys and values priced alike? On calibration text only, measure the joint KL of Stratigraphic's plan with only
its keys quantised (values exact), only its values (keys exact), and both, against what the single-tensor costs the
knapsack adds predict for each. With `--write OUT.json`, also write the calibration with each kind's costs scaled by
its joint/predicted factor (the knapsack's prices corrected, per kind, for how that kind's errors add up at the plan).

On WikiText-2's evaluation windows (`strat-parts-*`) the 4× plan's keys alone cost twice its values alone, where the
single costs predict them level; this script asks the same question of the calibration windows (4 per text of 320
tokens, the shipped 2 and 2 more; nothing from any evaluation window; KL over the last 160 positions, every token
but the sinks at the plan's widths, teacher-forced).
    python scripts/keys_values.py 4 [--write OUT.json]     # ~2 minutes on 2 CPU cores
"""
import sys, json
from dataclasses import replace
from pathlib import Path
import torch
import torch.nn.functional as F
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.sensitivity import FORMAT_BITS, calibration_set, requantized, _kl
from kvstrat.linear_attention import attention_override, causal_attention
from kvstrat.policy import make_strategy

SINKS, KINDS = 4, ('keys', 'values')

@torch.no_grad()
def recent_exact_attention(q, k, v, kq, vq, scaling:float, recent:int): # (B, H_q, T, D); (B, H_kv, T, D) each
    "Causal attention in which each query reads its `recent` newest tokens exact (k, v) and older ones quantised."
    g, T = q.shape[1] // k.shape[1], q.shape[2]
    k, v, kq, vq = (x.repeat_interleave(g, 1).float() for x in (k, v, kq, vq))
    age = torch.arange(T)[:, None] - torch.arange(T)[None] # (T, T) query position - key position
    near = (age >= 0) & (age < recent)
    scores = torch.where(near, q.float() @ k.transpose(-1, -2), q.float() @ kq.transpose(-1, -2)) * scaling
    p = scores.masked_fill(age < 0, float('-inf')).softmax(-1)
    return ((p * near) @ v + (p * ~near) @ vq).to(q.dtype).transpose(1, 2) # (B, T, H_q, D)

def main(ratio:float, write:Path|None=None, windows_per_text:int=4, length:int=320, recent:int=0):
    model, tok = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    L, H, D = spec.n_layers, spec.n_kv_heads, spec.head_dim
    windows, scored = calibration_set(tok, ['wikitext2', 'austen'], windows_per_text, length, 128), length // 2
    exact = F.log_softmax(model(windows, use_cache=False, logits_to_keep=scored).logits.float(), -1)
    strategy = make_strategy(f'stratigraphic:ratio={ratio}')
    plan, sens = strategy.prepare(spec), strategy.sensitivity(spec)
    width = torch.tensor([[[FORMAT_BITS.index(int(b)) for b in head] for head in layer] for layer in plan.widths])
    def joint(kinds): # KL with the plan's widths on `kinds` (0: keys, 1: values), the other kind exact
        def attend(i, q, k, v, s):
            kv = [k.clone(), v.clone()]
            for h in range(H):
                for j in kinds:
                    b = FORMAT_BITS[int(width[i, h, j])]
                    kv[j][:, h] = requantized(kv[j][:, h], strategy.family.spec(b, b, D), j == 0, SINKS)
            return recent_exact_attention(q, k, v, *kv, s, recent) if recent else causal_attention(q, *kv, s)
        with attention_override(model, attend):
            return _kl(exact, model(windows, use_cache=False, logits_to_keep=scored).logits).item()
    predicted = [sens.cost[..., j, :].gather(-1, width[..., j, None]).sum().item() for j in (0, 1)]
    measured = [joint([0]), joint([1])]
    factor = [m / p for m, p in zip(measured, predicted)]
    both = joint([0, 1])
    print(json.dumps(dict(ratio=ratio, windows=len(windows), length=length, recent=recent, joint_kl_both=round(both, 5),
                          predicted_both=round(sum(predicted), 5),
                          **{f'{k}_{what}': round(x[j], 5) for j, k in enumerate(KINDS)
                             for what, x in (('joint_kl', measured), ('predicted', predicted), ('factor', factor))})))
    if write:
        scaled = replace(sens, cost=sens.cost * torch.tensor(factor)[:, None],
                         source=f'{sens.source}; keys\' costs x{factor[0]:.3f}, values\' x{factor[1]:.3f}: each kind\'s '
                                f'joint KL at the {ratio}x plan over its single costs, on {len(windows)} calibration windows')
        scaled.save(write)

if __name__ == '__main__':
    torch.set_num_threads(2)
    write = Path(sys.argv[sys.argv.index('--write') + 1]) if '--write' in sys.argv else None
    main(float(sys.argv[1]), write)
