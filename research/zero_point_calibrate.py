"""`kvstrat-calibrate`, with every group's zero-point rounded as an 8-bit code would round it: a scratch measurement
of what that rounding costs in KL, on calibration text only. The format itself is not built.

`zero_point_error.py` tried a signed 8-bit code on a grid of 1/32 of the group's range for keys and 1/128 for values.
This process rounds each stored zero-point down onto that grid (kept in fp16, within 5e-4 of a grid step) and widens
the 8-bit log scale one code where the maximum is left uncovered, then measures the width costs exactly as
`kvstrat-calibrate` does. Only this process's quantiser is replaced, for its lifetime; it takes the same arguments:
    cp kvstrat/data/sensitivity-smollm2-135m-rotated-window-128.json Z.json
    python research/zero_point_calibrate.py --rotate --only-widths --residual 12 --window 128 --threads 1 --out Z.json
"""
import sys
import torch
import kvstrat.quant as quant, kvstrat.formats as formats
from kvstrat.sensitivity import load_sensitivity
from kvstrat.measure import main

GRID = {'channel': 32, 'token': 128} # 1/share of a group's range, by axis: keys' groups (channel), values' (token)
fp16_zero, quantize = quant.stored_scale_zero, formats.quantize
share = [] # the grid of the group being quantised, set around each call

def scale_zero_8bit(lo:torch.Tensor, hi:torch.Tensor, bits:int, scale_bits:int=16):
    "`quant.stored_scale_zero` with the zero-point rounded down onto the 8-bit grid, the scale widened where it must."
    if scale_bits != 8: return fp16_zero(lo, hi, bits, scale_bits)
    levels = 2**bits - 1
    scale = quant.stored_scale((hi - lo) / levels, 8)
    for _ in range(4):
        unit = levels * quant.scale_values(scale) / share[-1]
        zero = quant.fp16_toward(torch.floor(lo / unit).clamp(-128, 127) * unit, up=False)
        need = (hi - zero.float()) / levels
        short = quant.scale_values(scale) < need
        if not short.any(): break
        scale = torch.where(short, quant.stored_scale(need, 8), scale)
    return scale, zero

def quantize_8bit_zero(x, bits, group, axis='token', *args, **kwargs):
    share.append(GRID[axis])
    try: return quantize(x, bits, group, axis, *args, **kwargs)
    finally: share.pop()

NOTE = (" (zero-points rounded onto an 8-bit grid, 1/32 of a group's range for keys and 1/128 for values: "
        "research/zero_point_calibrate.py; the format is not built)")

def mark(path:str):
    "Say in the file's `source` that its width costs are the emulated format's, not the store's."
    calibration = load_sensitivity(path)
    if NOTE not in calibration.source: calibration.source += NOTE
    calibration.save(path)

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__) # then kvstrat-calibrate's options
    quant.stored_scale_zero, formats.quantize = scale_zero_8bit, quantize_8bit_zero
    if (status := main(sys.argv[1:])) == 0: mark(sys.argv[sys.argv.index('--out') + 1])
    sys.exit(status)
