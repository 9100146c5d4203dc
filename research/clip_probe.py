"""Does a searched clipping range lower what a head's low-bit keys or values cost? (calibration windows only)

    python research/clip_probe.py OUT.txt [LAYER...]   # every layer by default; about a minute a layer on 2 cores

Min-max quantisation spends its levels on each group's extremes. A common alternative picks, per group, the range
`mid ± c·half` (c from `GRID`) whose round-trip squared error is least; c = 1 is min-max, so no group's error grows.
This probe measures, on the shipped calibration's windows (`calibration_set`: WikiText-2 and Austen, 2 windows of 320
tokens each, outside every evaluation window) and with its reading (sinks and newest tokens at fp16), the KL each
head's keys or values cost alone at 3 and 2 bits in Stratigraphic's rotated formats, min-max against searched. The
search is a diagnosis here, not a format: `kvstrat.formats.quantize` is replaced only inside `searched()`.
"""
import sys, time
from contextlib import contextmanager
from unittest import mock
import torch
import kvstrat.quant as Q
from kvstrat.core import load_model
from kvstrat.sensitivity import FormatFamily, held_exact
from kvstrat.measure import calibration_set, exact_pass, width_costs

GRID = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5) # range shrink factors tried per group, min-max first (it wins ties)

def quantize_searched(x, bits, group, axis='token', symmetric=False, scale_bits=16):
    "`kvstrat.quant.quantize` with each group's range shrunk by the factor in `GRID` of least squared error."
    if symmetric or bits == 8: return Q.quantize(x, bits, group, axis, symmetric, scale_bits)
    xg, dim = Q.to_groups(x.float(), group, axis)
    lo, hi = torch.aminmax(xg, dim=dim, keepdim=True)
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    best = None
    for c in GRID:
        scale, zero = Q.stored_scale_zero(mid - c * half, mid + c * half, bits, scale_bits)
        s, z = Q.scale_values(scale), zero.float()
        err = (((xg - z) / s).round().clamp(0, 2**bits - 1) * s + z - xg).square().sum(dim, keepdim=True)
        if best is None: best, bs, bz = err, scale, zero
        else:
            take = err < best
            best, bs, bz = torch.where(take, err, best), torch.where(take, scale, bs), torch.where(take, zero, bz)
    codes = ((xg - bz.float()) / Q.scale_values(bs)).round_().clamp_(0, 2**bits - 1).to(torch.uint8)
    packed = Q.pack_bits(Q.from_groups(codes, axis, x.shape[-2]), bits)
    return Q.QTensor(packed, bs.squeeze(dim), bz.squeeze(dim), bits, group, axis, tuple(x.shape), x.dtype)

@contextmanager
def searched():
    with mock.patch('kvstrat.formats.quantize', quantize_searched): yield

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 2: sys.exit(__doc__)
    torch.set_num_threads(2)
    model, tok = load_model('smollm2-135m')
    w = calibration_set(tok, ['wikitext2', 'austen'], 2, 320, 128) # the shipped calibration's windows
    exact = exact_pass(model, w, 160, keep_attention=True)
    family, held, bits, at = FormatFamily(rotate=True), held_exact(320, 4, 12, 32), (3, 2), [2, 3] # 3 and 2 bits
    layers = [int(a) for a in sys.argv[2:]] or range(model.config.num_hidden_layers)
    with open(sys.argv[1], 'w') as out:
        print('layer tensor bits minmax_kl searched_kl (summed over the layer\'s KV heads, nats per token)', file=out)
        for layer in layers:
            t = time.time()
            plain = width_costs(model, exact, layer, family, bits, 4, held)[..., at] # (H_kv, 2, len(bits))
            with searched(): clipped = width_costs(model, exact, layer, family, bits, 4, held)[..., at]
            for kv in (0, 1):
                for j, b in enumerate(bits):
                    print(layer, 'KV'[kv], b, f'{plain[:, kv, j].sum():.6f}', f'{clipped[:, kv, j].sum():.6f}', file=out)
            out.flush(); print(f'layer {layer}: {time.time() - t:.0f} s', file=sys.stderr, flush=True)
