"""How much an 8-bit zero-point adds to the rounding error of Stratigraphic's formats: no evaluation text is read.

Today each group stores its zero-point in fp16: its minimum rounded down. The 8-bit one tried here is a signed code
`z` on a grid of `1/share` of the group's range (`zero = z · (2**bits - 1) · scale / share`), so the decoder needs
nothing but the stored scale. Rounding the zero down can leave the maximum uncovered; the 8-bit log scale's own
round-up usually covers it, and where it does not the scale moves one code up. A code outside [-128, 127] is
clamped (counted as overflow). Keys and values of 4 calibration windows (2 of WikiText-2, 2 of Austen, disjoint from
every evaluation window; the 4 sinks left out, as tier 0 keeps them), Hadamard-rotated as the store does, in the
store's groups (keys: per channel over 32 rows; values: per row over the head's 64 channels). Prints, per width and
grid, the mean squared error against today's fp16 zero-points, and the share of groups that overflow.
    python research/zero_point_error.py            # a minute; needs KVSTRAT_WIKITEXT
"""
import json, sys
import torch
from transformers import DynamicCache
from kvstrat.core import load_model
from kvstrat.measure import calibration_set
from kvstrat.quant import hadamard, stored_scale, scale_values, stored_scale_zero

def store_groups(x:torch.Tensor, is_key:bool, sinks:int=4, group:int=32) -> torch.Tensor: # (n, elements)
    "One layer's `x` (B, H_kv, T, D), rotated, past its sinks, in whole groups as the store quantises them."
    x = x[:, :, sinks:].float() @ hadamard(x.shape[-1])
    B, H, T, D = x.shape
    if not is_key: return x.reshape(-1, D)
    T -= T % group
    return x[:, :, :T].reshape(B, H, T // group, group, D).transpose(-1, -2).reshape(-1, group)

def rounding_error(g:torch.Tensor, bits:int, share:int|None) -> tuple[float, float]:
    "Mean squared error of `g`'s groups at `bits`, with an fp16 zero-point (`share=None`) or an 8-bit one; overflow."
    lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
    levels, overflow = 2**bits - 1, 0.
    if share is None: # as `quantize` stores a group today
        scale, zero = stored_scale_zero(lo, hi, bits, scale_bits=8)
        scale, zero = scale_values(scale), zero.float()
    else:
        scale = scale_values(stored_scale((hi - lo) / levels, 8))
        for _ in range(4): # each pass widens only the groups whose maximum the rounded-down zero leaves uncovered
            unit = levels * scale / share
            code = torch.floor(lo / unit)
            zero = code.clamp(-128, 127) * unit
            need = (hi - zero) / levels
            if (scale >= need).all(): break
            scale = torch.where(scale >= need, scale, scale_values(stored_scale(need, 8)))
        overflow = ((code < -128) | (code > 127)).float().mean().item()
    codes = ((g - zero) / scale).round().clamp(0, levels)
    return ((codes * scale + zero - g) ** 2).mean().item(), overflow

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    model, tokenizer = load_model('smollm2-135m', None)
    windows = calibration_set(tokenizer, ['wikitext2', 'austen'], 2, 1024, 128) # (4, 1024)
    cache = DynamicCache()
    with torch.no_grad(): model(windows, cache=cache, use_cache=True)
    for is_key, kind in ((True, 'keys'), (False, 'values')):
        g = torch.cat([store_groups(layer.keys if is_key else layer.values, is_key) for layer in cache.layers])
        for bits in (2, 3, 4, 8):
            fp16_zero, _ = rounding_error(g, bits, None)
            for share in (32, 64, 128):
                mse, overflow = rounding_error(g, bits, share)
                print(json.dumps(dict(kind=kind, bits=bits, grid=f'1/{share}', mse_ratio=round(mse / fp16_zero, 4),
                                      overflow=round(overflow, 5))), flush=True)
