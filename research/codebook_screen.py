"""Codebook values against integer codes, screened on calibration text (SmolLM2-135M, the 4 shipped calibration
windows of 320 tokens, no evaluation text).

`local`: every layer and KV head, one tensor requantised at a time past 4 fp16 sinks (as `requantized` stores it),
the mean squared error it puts in its head's attention output over the last 160 positions, relative to that output's
mean square, averaged over the 90 heads: integer values and keys (today's formats), codebook values and keys, and
keys as a codebook on per-channel groups of 32 tokens (a mean and an 8-bit σ per channel). `kl`: the KL each value
tensor of layers 0, 10 and 18 costs alone at 3 and 2 bits (`width_costs`, each query's 4 newest tokens exact), for
integer values, codebook values with the least-squares scale (the encoder until 2026-12-08) and with today's scale:
    python research/codebook_screen.py local
    python research/codebook_screen.py kl
"""
import sys
from unittest import mock
import torch
from kvstrat.core import load_model
from kvstrat.measure import exact_pass, calibration_set, read_requantised, width_costs
from kvstrat.sensitivity import FormatFamily, held_exact, requantized
from kvstrat.quant import (gaussian_codebook, hadamard, log_scale_decode, log_scale_encode, nearest_scale,
                           codebook_quantize, codebook_dequantize)
import kvstrat.formats
if {'-h', '--help'} & set(sys.argv[1:]) or sys.argv[1:] not in (['local'], ['kl']): print(__doc__); sys.exit()

def least_squares(y, bits, scale_bits=16): # codebook_quantize as it was at 7c30641: the same codes, another scale
    codes, _ = codebook_quantize(y, bits, scale_bits)
    c = gaussian_codebook(bits)[codes.long()]
    return codes, nearest_scale((y * c).sum(-1, keepdim=True) / (c * c).sum(-1, keepdim=True), scale_bits)

def channel_codebook(x, bits): # (T, D) rows of one head: rotated, per channel group of 32 tokens a mean and an 8-bit σ
    H = hadamard(x.shape[-1]); y = x.float() @ H
    pad = -len(y) % 32
    g = torch.cat([y, y[-1:].expand(pad, -1)]).view(-1, 32, y.shape[-1])
    mu = g.mean(1, keepdim=True).half().float()
    sd = log_scale_decode(log_scale_encode((g - mu).pow(2).mean(1, keepdim=True).sqrt()))
    book = gaussian_codebook(bits)
    out = book[torch.bucketize((g - mu) / sd, (book[1:] + book[:-1]) / 2)] * sd + mu
    return out.view(-1, y.shape[-1])[:len(y)] @ H.T

torch.set_num_threads(1)
model, tok = load_model('smollm2-135m')
exact = exact_pass(model, calibration_set(tok, ['wikitext2', 'austen'], 2, 320, 128), 160, keep_attention=True)
if sys.argv[1] == 'kl':
    held = held_exact(320, 4, 4, 32)
    arms = {'integers': (FormatFamily(rotate=True), None), 'least squares': (FormatFamily(rotate=True, value_codebook=True),
            least_squares), 'unbiased': (FormatFamily(rotate=True, value_codebook=True), None)}
    for layer in (0, 10, 18):
        for name, (family, encoder) in arms.items():
            with mock.patch.object(kvstrat.formats, 'codebook_quantize', encoder or codebook_quantize):
                cost = width_costs(model, exact, layer, family, measured=(3, 2), held=held)
            print(f'layer {layer:2} {name:13} values 3 bits {[f"{c:.1e}" for c in cost[:, 1, 2].tolist()]} '
                  f'2 bits {[f"{c:.1e}" for c in cost[:, 1, 3].tolist()]}', flush=True)
    sys.exit()
family, D, H, sinks, errors = FormatFamily(rotate=True), 64, hadamard(64), 4, {}
for q, k, v, scaling, window in exact.attention:
    g = q.shape[1] // k.shape[1]
    for h in range(k.shape[1]):
        qh, kh, vh = q[:, h * g:(h + 1) * g], k[:, h:h + 1], v[:, h:h + 1]
        ref = read_requantised(qh, kh, vh, kh, vh, scaling, window, None)[:, -160:]
        for is_key, x in ((True, kh[:, 0]), (False, vh[:, 0])):
            rows = x[:, sinks:].reshape(-1, D).float() @ H
            for b in (4, 3, 2):
                arms = {'integer': requantized(x, family.spec(b, b, D), is_key, sinks),
                        'codebook': torch.cat([x[:, :sinks], (codebook_dequantize(*codebook_quantize(rows, b), b) @ H.T)
                                               .view(len(x), -1, D)], 1)}
                if is_key: arms['per-channel codebook'] = torch.cat([x[:, :sinks], torch.stack(
                    [channel_codebook(w[sinks:], b) for w in x])], 1)
                for name, xq in arms.items():
                    kq, vq = (xq[:, None], vh) if is_key else (kh, xq[:, None])
                    out = read_requantised(qh, kh, vh, kq, vq, scaling, window, None)[:, -160:]
                    errors.setdefault(('keys' if is_key else 'values', name, b), []).append(
                        ((out - ref).pow(2).mean() / ref.pow(2).mean()).item())
for (tensor, name, b), e in sorted(errors.items()):
    print(f'{tensor:6} {name:20} {b} bits: {torch.tensor(e).mean():.4f}')
