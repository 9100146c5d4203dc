"""Where the bits go: the 4× Stratigraphic plans of SmolLM2-135M and Gemma-3-270M, from their shipped calibrations.

Plans from the model shapes alone (no weights, no text), so it runs in seconds. Prints each plan's widths, windows and
bytes per head, and writes `where-bits-go-MODEL-4x.png` (`plot_plan`) into OUT:
    python research/where_bits_go.py nbs/results/stratigraphic
"""
import sys
from collections import Counter
import torch
from kvstrat.adapter import ModelSpec
from kvstrat.stratigraphic import Stratigraphic, plot_plan
if {'-h', '--help'} & set(sys.argv[1:]) or len(sys.argv) != 2: print(__doc__); sys.exit()

SPECS = {'smollm2-135m': ModelSpec('llama', 30, 9, 3, 64, (False,) * 30),
         # Gemma 3: five sliding layers (window 512), then a global one
         'gemma3-270m': ModelSpec('gemma3_text', 18, 4, 1, 256, tuple((i + 1) % 6 != 0 for i in range(18)), 512)}
for name, spec in SPECS.items():
    plan = Stratigraphic(ratio=4.0).prepare(spec)
    windowed = plan.windowed if plan.windowed is not None else torch.zeros_like(plan.tier, dtype=torch.bool)
    widths = lambda i: dict(sorted(Counter(plan.widths[..., i].flatten().tolist()).items()))
    kb = plan.head_bytes / 1024
    print(f'{name}: planned {plan.planned:.3f}x; key bits {widths(0)}, value bits {widths(1)} (heads at each width); '
          f'{int(windowed.sum())} keep a quantised window; KB per head {kb.min():.1f} / {kb.median():.1f} / '
          f'{kb.max():.1f} (min / median / max), {kb.sum():.0f} in all')
    plot_plan(plan, f'{name}: stratigraphic:ratio=4.0 at length 1024 ({plan.planned:.2f}x planned)',
              f'{sys.argv[1]}/where-bits-go-{name}-4x.png')
