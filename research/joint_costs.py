"""Can heads be priced jointly? Measure, on the calibration windows, what each tensor costs one width up or down from
Stratigraphic's plan with every other tensor at its planned width, and compare with the costs measured alone.

The shipped calibration prices each (layer, KV head)'s keys and values alone, every other tensor exact, and the knapsack
adds those prices. This script measures the plan's joint KL, each layer's joint KL with the other layers exact, and
the marginal KL of every one-step change (`KL(plan with the change) - KL(plan)`), on the same 4 windows of 320 tokens
(KL over the last 160 positions) the shipped calibration used: nothing from any evaluation window.
    python research/joint_costs.py 4      # ~15 minutes on 2 CPU cores
"""
import sys, time
import torch
import torch.nn.functional as F
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec, batch_repeated
from kvstrat.sensitivity import FORMAT_BITS, requantized, kl_from_exact
from kvstrat.measure import calibration_set
from kvstrat.linear_attention import attention_override, causal_attention
from kvstrat.policy import make_strategy

SCORED, SINKS, PER_PASS = 160, 4, 6

@torch.no_grad()
def main(ratio:float):
    model, tok = load_model('smollm2-135m', None)
    spec = ModelSpec.of(model)
    L, H, D = spec.n_layers, spec.n_kv_heads, spec.head_dim
    windows = calibration_set(tok, ['wikitext2', 'austen'], 2, 320, 128) # the shipped calibration's windows
    strategy = make_strategy(f'stratigraphic:ratio={ratio},window=none,rotate=false')
    plan, single = strategy.prepare(spec), strategy.sensitivity(spec).cost # (L, H, 2, widths): priced alone
    width = torch.tensor([[[FORMAT_BITS.index(int(b)) for b in head] for head in layer] for layer in plan.widths])
    at = lambda x, kv, j: requantized(x, strategy.family.spec(FORMAT_BITS[j], FORMAT_BITS[j], D), kv == 0, SINKS)
    def planned(i, k, v, layers): # layer i's keys and values at the plan's widths, if i is in `layers`
        if i not in layers: return k, v
        k, v = k.clone(), v.clone()
        for h in range(H):
            for kv, x in enumerate((k, v)): x[:, h] = at(x[:, h], kv, int(width[i, h, kv]))
        return k, v
    exact = F.log_softmax(model(windows, use_cache=False, logits_to_keep=SCORED).logits.float(), -1)
    def kl(layers):
        with attention_override(model, lambda i, q, k, v, s: causal_attention(q, *planned(i, k, v, layers), s)):
            return kl_from_exact(exact, model(windows, use_cache=False, logits_to_keep=SCORED).logits).item()
    every = set(range(L))
    base = kl(every)
    alone = lambda l, h, kv, j: single[l, h, kv, j].item()
    summed = sum(alone(l, h, kv, int(width[l, h, kv])) for l in range(L) for h in range(H) for kv in (0, 1))
    print(f'plan at {ratio}x: joint KL {base:.5f} nats/token; its tensors priced alone sum to {summed:.5f}')
    per_layer = [kl({l}) for l in range(L)]
    layer_alone = [sum(alone(l, h, kv, int(width[l, h, kv])) for h in range(H) for kv in (0, 1)) for l in range(L)]
    ratios = [p / a for p, a in zip(per_layer, layer_alone)]
    print(f'each layer alone at the plan: summed {sum(per_layer):.5f}; each {min(ratios):.2f}–{max(ratios):.2f}× '
          f'its tensors priced alone')
    moves, t0 = {'up': [], 'down': []}, time.time() # (marginal, difference of the costs priced alone)
    for li in range(L):
        variants = [(h, kv, j) for h in range(H) for kv in (0, 1) for j in range(len(FORMAT_BITS))
                    if abs(j - int(width[li, h, kv])) == 1]
        for c0 in range(0, len(variants), PER_PASS):
            part = variants[c0:c0 + PER_PASS]
            def attend(i, q, k, v, s):
                if i != li: return causal_attention(q, *planned(i, k, v, every), s)
                kp, vp = planned(i, k, v, every) # then each copy of the batch changes one tensor of layer li
                for c, (h, kv, j) in enumerate(part):
                    rows = slice(c * len(windows), (c + 1) * len(windows))
                    (kp, vp)[kv][rows, h] = at((k, v)[kv][rows, h], kv, j)
                return causal_attention(q, kp, vp, s)
            with attention_override(model, attend), batch_repeated(model, li, len(part)):
                got = kl_from_exact(exact, model(windows, use_cache=False, logits_to_keep=SCORED).logits).tolist()
            for (h, kv, j), k in zip(part, got):
                j0 = int(width[li, h, kv])
                moves['up' if j < j0 else 'down'].append((k - base, alone(li, h, kv, j) - alone(li, h, kv, j0)))
        print(f'layer {li + 1}/{L}: {time.time() - t0:.0f} s', file=sys.stderr, flush=True)
    for name, m in moves.items():
        marginal, priced = torch.tensor(m).T
        right = (marginal < 0) if name == 'up' else (marginal > 0)
        r = torch.corrcoef(torch.stack([marginal, priced]))[0, 1]
        print(f'{name} one width ({len(m)} tensors): marginal mean {marginal.mean():+.5f}, median '
              f'{marginal.median():+.5f}, sd {marginal.std():.5f}; the expected sign in {right.float().mean():.0%}; '
              f'priced alone, mean {priced.mean():+.5f}; correlation {r:.2f}')

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(2)
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)
