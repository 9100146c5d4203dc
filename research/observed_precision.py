"""How far the observed read (`observed_attention`, causal blocks, fused softmax) and the whole-chunk explicit read it
replaced (as at d68d08f: keys broadcast over the query heads, log-sum-exp, exp) are from float64, on random inputs:
    python research/observed_precision.py
"""
import sys
import torch
from kvstrat.attention import allowed_slots, observed_attention

B, H, g, T, D, SCALING = 1, 3, 3, 2048, 64, 0.125

def whole_read(query, key, value, allowed): # (B, H*g, T, D), (B, H, T, D) ×2: output (B, T, H*g, D), probs
    s = (query.reshape(B, H, g, T, D) @ key[:, :, None].transpose(-1, -2)) * SCALING
    s = s.masked_fill(~allowed[:, :, None], float('-inf'))
    lse = s.logsumexp(-1)
    p = (s - lse[..., None]).exp()
    return (p @ value[:, :, None]).view(B, H * g, T, D).transpose(1, 2), p

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H * g, T, D) * 2, torch.randn(B, H, T, D) * 2, torch.randn(B, H, T, D)
    pos = torch.arange(T)
    slots = pos[None, None].expand(B, H, T)
    allowed = allowed_slots(slots, pos)
    o64, p64 = whole_read(q.double(), k.double(), v.double(), allowed)
    sum64 = p64.mean(2).flatten(0, 1).sum(1) # (B*H, T) attention each slot got, summed over the queries
    o_old, p_old = whole_read(q, k, v, allowed)
    o_new, sum_new = observed_attention(q, k, v, slots, pos, None, SCALING, summed=True, causal=True)
    rel = lambda s: float(((s.double() - sum64).abs() / sum64.clamp(min=1e-3)).max())
    reads = (('whole read (before)', o_old, p_old.mean(2).flatten(0, 1).sum(1)), ('observed read', o_new, sum_new[:, 0]))
    for name, o, s in reads:
        print(f'{name}: output max error {float((o.double() - o64).abs().max()):.2e}, summed attention max relative '
              f'error {rel(s):.2e}')
