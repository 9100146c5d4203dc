"""Do a plan's costs add up, width by width and for its evicting heads? On calibration windows only.

For Stratigraphic's plan at a ratio (with `window=64`), measure the joint KL of the tensors the plan stores at each
width (every other tensor exact, each query's sinks and `residual` newest tokens read at fp16, as the cache holds
them: the 320-token windows the widths were priced on) and of its evicting heads together (every other head exact:
the 1,024-token windows eviction was priced on), against the sum of their single costs. A factor well above 1 means
the knapsack under-prices that choice when the plan makes it many times. Each width's tensors are measured jointly on
the 1,024-token windows too (`joint_1024`), to see whether a width costs more where a query reads more quantised
tokens, as eviction does with more past its window (the widths were priced on 320-token windows). The whole plan
(every width and the evicting heads together) is measured on the 1,024-token windows too, against the sum of all
its single costs (`whole_plan_1024`, `predicted`).
    python research/joint_factors.py 6 8 [--calibration FILE]     # about two minutes per ratio on 2 CPU cores
"""
import json, os, sys
import torch
import torch.nn.functional as F
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.sensitivity import (FORMAT_BITS, requantized, held_exact, mixed_attention, evicting_attention,
                                 kl_from_exact)
from kvstrat.measure import calibration_set
from kvstrat.linear_attention import attention_override, causal_attention
from kvstrat.policy import make_strategy

def plan_attention(q, k, v, kq, vq, s, held, evicting:list[int], sinks:int, window:int):
    "Causal attention reading `held` tokens exact, the rest requantised; `evicting` KV heads see sinks and window."
    g, T = q.shape[1] // k.shape[1], q.shape[2]
    k, v, kq, vq = (x.repeat_interleave(g, 1).float() for x in (k, v, kq, vq))
    t, p = torch.arange(T)[:, None], torch.arange(T)[None]
    seen = (p <= t).expand(q.shape[0], q.shape[1], T, T).clone() # (B, H_q, T, T)
    for h in evicting: seen[:, h * g:(h + 1) * g] &= (p < sinks) | (p >= t - window)
    scores = torch.where(held, q.float() @ k.transpose(-1, -2), q.float() @ kq.transpose(-1, -2)) * s
    w = scores.masked_fill(~seen, float('-inf')).softmax(-1)
    return ((w * held) @ v + (w * ~held) @ vq).to(q.dtype).transpose(1, 2)

@torch.no_grad()
def main(ratios:list[float], window:int=64, calibration:str='auto'):
    model, tok = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    short = calibration_set(tok, ['wikitext2', 'austen'], 2, 320, 128) # the windows the widths were priced on
    long = calibration_set(tok, ['wikitext2', 'austen'], 2, 1024, 128) # and eviction
    logp = lambda w: F.log_softmax(model(w, use_cache=False, logits_to_keep=w.shape[1] // 2).logits.float(), -1)
    exact_short, exact_long = logp(short), logp(long)
    for ratio in ratios:
        strategy = make_strategy(f'stratigraphic:ratio={ratio},window={window},rotate=false,quantised_window=false,'
                                 f'calibration={calibration}')
        plan, sens = strategy.prepare(spec), strategy.sensitivity(spec)
        def at_plan(i, k, v, chosen): # layer i's keys and values, `chosen` (L, H, 2) tensors at their widths
            kq, vq = k.clone(), v.clone()
            for h, kv in chosen[i].nonzero().tolist():
                b, x = int(plan.widths[i, h, kv]), (kq, vq)[kv]
                x[:, h] = requantized(x[:, h], strategy.family.spec(b, b, spec.head_dim), kv == 0, strategy.sinks)
            return kq, vq
        def widths_kl(chosen, windows, exact): # these tensors at their planned widths, the rest exact
            held = held_exact(windows.shape[1], strategy.sinks, strategy.residual, strategy.group)
            attend = lambda i, q, k, v, s: mixed_attention(q, k, v, *at_plan(i, k, v, chosen), s, held)
            with attention_override(model, attend):
                logits = model(windows, use_cache=False, logits_to_keep=exact.shape[1]).logits
                return kl_from_exact(exact, logits).item()
        evicts = plan.widths[..., 0] == 0 # (L, H)
        def attend_evicting(i, q, k, v, s):
            heads = evicts[i].nonzero().flatten().tolist()
            if not heads: return causal_attention(q, k, v, s)
            return evicting_attention(q, k, v, s, [(slice(None), h) for h in heads], strategy.sinks, window)
        with attention_override(model, attend_evicting):
            logits = model(long, use_cache=False, logits_to_keep=exact_long.shape[1]).logits
        evict_joint = kl_from_exact(exact_long, logits).item()
        index = torch.tensor([FORMAT_BITS.index(int(b)) if b in FORMAT_BITS else 0 for b in plan.widths.flatten()])
        single = sens.cost.flatten(0, 2).gather(1, index[:, None]).view(plan.widths.shape) # (L, H, 2) priced alone
        held_long = held_exact(long.shape[1], strategy.sinks, strategy.residual, strategy.group)
        def attend_plan(i, q, k, v, s): # the whole plan: every tensor at its width, the evicting heads evicting
            return plan_attention(q, k, v, *at_plan(i, k, v, plan.widths > 0), s, held_long,
                                  evicts[i].nonzero().flatten().tolist(), strategy.sinks, window)
        with attention_override(model, attend_plan):
            logits = model(long, use_cache=False, logits_to_keep=exact_long.shape[1]).logits
        whole = kl_from_exact(exact_long, logits).item()
        rows = dict(ratio=ratio, window=window, calibration=calibration, planned=round(plan.planned, 3),
                    whole_plan_1024=round(whole, 5), predicted=round(single[plan.widths > 0].sum().item()
                                                                     + sens.evict[evicts].sum().item(), 5))
        for b in FORMAT_BITS:
            chosen = plan.widths == b
            if chosen.any():
                joint, alone = widths_kl(chosen, short, exact_short), single[chosen].sum().item()
                rows[f'{b}bit'] = dict(tensors=int(chosen.sum()), joint=round(joint, 5), alone=round(alone, 5),
                                       factor=round(joint / alone, 2),
                                       joint_1024=round(widths_kl(chosen, long, exact_long), 5))
        alone = sens.evict[evicts].sum().item()
        rows['evict'] = dict(heads=int(evicts.sum()), joint=round(evict_joint, 5), alone=round(alone, 5),
                             factor=round(evict_joint / alone, 2))
        print(json.dumps(rows), flush=True)

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(int(os.environ.get('THREADS', 2))) # THREADS=1 beside other work
    calibration = sys.argv[sys.argv.index('--calibration') + 1] if '--calibration' in sys.argv else 'auto'
    main([float(r) for r in sys.argv[1:] if r.replace('.', '').isdigit()], calibration=calibration)
