"""Where Stratigraphic's bytes and loss go, under protocol P (SmolLM2-135M, 8 windows of 1,024 tokens).

    python research/where_loss_goes.py bytes OUT.json [PLAN...]   # the plans' bytes by part, ~2 minutes
    python research/where_loss_goes.py loss TEXT OUT_DIR          # kvstrat-bench rows, ~40 s each on 2 cores
    python research/where_loss_goes.py loss TEXT OUT_DIR PLAN...  # each PLAN, its evicting and its quantised heads

`bytes` writes protocol P's tokens (a 512-token prefill, then chunks of 16 to 1,023 tokens) of WikiText-2's 8
windows into each plan's cache and records `CompressedCache.nbytes_by_part()` at the end: the bytes are those of
the stored tensors at the length the plans are made for (protocol P's compression is their mean over the steps).

`loss` runs each plan, then each part of it alone (`plan_part`: the heads outside the part at fp16, the tensors
outside it at 8 bits), paired with FullKV on the same windows, as the strategy `stratigraphic-part`. Nothing is
chosen from these rows: they attribute the shipped plans' loss. The committed results were made at 1d34118, with the
widths shipped then (`nbs/results/stratigraphic/sensitivity-sinks-only.json`).
"""
import sys, json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
import torch
from kvstrat.stratigraphic import Stratigraphic, plan_part, register, load_model, load_text, tokenize, eval_windows
from kvstrat.cache import CompressedCache, prefill_cache
from kvstrat import cli

@register
@dataclass
class StratigraphicPart(Stratigraphic):
    "Stratigraphic's plan on one part alone (`plan_part`), to attribute its loss: a diagnosis, not a compressor."
    name: ClassVar[str] = 'stratigraphic-part'
    layers: str = 'all' # 'A-B': layers A to B alone
    zone: str = 'all' # 'evicting' or 'quantised' heads alone
    tensors: str = 'both' # 'keys' or 'values' alone
    bits: int|None = None # the tensors planned at these bits alone

    def prepare(self, spec, heads=None):
        layers = None if self.layers == 'all' else tuple(int(l) for l in self.layers.split('-'))
        return plan_part(super().prepare(spec, heads), layers, self.zone, self.tensors, self.bits)

PLANS = ('stratigraphic:window=none,rotate=false', # as measured, before rotation and quantised windows were defaults
         'stratigraphic:ratio=6,window=64,rotate=false,quantised_window=false',
         'stratigraphic:ratio=8,window=64,rotate=false,quantised_window=false')
PARTS = {PLANS[0]: ['layers=0-9', 'layers=10-19', 'layers=20-29', 'tensors=keys', 'tensors=values',
                    'bits=2', 'bits=3', 'bits=4'],
         PLANS[1]: ['zone=evicting', 'zone=quantised'], PLANS[2]: ['zone=evicting', 'zone=quantised']}

def part_specs(plans:dict) -> list[str]:
    "Each plan, then each of its parts alone."
    out = []
    for plan, parts in plans.items():
        args = plan.partition(':')[2]
        out += [plan] + [f"stratigraphic-part:{','.join(filter(None, [args, p]))}" for p in parts]
    return out

@torch.no_grad()
def plan_bytes(out:Path, plans:list[str]):
    model, tok = load_model('smollm2-135m', None)
    windows = eval_windows(tokenize(tok, load_text('wikitext2')[0]), 8, 1024)
    rows = []
    for spec in plans:
        cache = CompressedCache(model, spec)
        with cache.attached(model):
            prefill_cache(model, cache, windows[:, :512])
            prefill_cache(model, cache, windows[:, 512:1023], chunk=16)
        parts = {f'{fmt}|{part}': n for (fmt, part), n in sorted(cache.nbytes_by_part().items())}
        rows.append(dict(strategy=spec, tokens=cache.get_seq_length(), fp16_bytes=cache.fp16_nbytes(),
                         cache_bytes=cache.nbytes(), parts=parts))
        print(spec, round(cache.fp16_nbytes() / cache.nbytes(), 3), flush=True)
    out.write_text(json.dumps(rows, indent=1) + '\n')

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(2)
    if sys.argv[1:2] == ['bytes']: plan_bytes(Path(sys.argv[2]), sys.argv[3:] or PLANS)
    elif sys.argv[1:2] == ['loss']:
        plans = {plan: ['zone=evicting', 'zone=quantised'] for plan in sys.argv[4:]} or PARTS
        sys.exit(cli.main(['--protocol', 'ppl', '--windows', '8', '--text', sys.argv[2], '--threads', '2',
                           '--out', sys.argv[3], '--strategies', *part_specs(plans)]))
    else: sys.exit(__doc__)
