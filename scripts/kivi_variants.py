"""KIVI-4 variants the library does not expose, for DIARY.md ("where its +0.8 % comes from").

    python scripts/kivi_variants.py          # protocol P, 8 windows, every variant below

Key and value group sizes are split (`Kivi` uses one `group` for both), values alone can be rotated, and one side can
be left in fp16 to attribute the loss. The last two swap the cache's row encoder inside a scope that restores it.
"""
import dataclasses, sys
from contextlib import contextmanager
import torch
import kvstrat.cache as C
from kvstrat.core import load_model, load_text, tokenize, eval_windows
from kvstrat.protocol import decode_ppl

@dataclasses.dataclass
class SplitKivi(C.Kivi):
    "KIVI with its own value group size."
    value_group: int = 64
    def tiers(self, head_dim): return (C.FP16, C.TierSpec(self.bits, self.key_axis, self.group, self.value_group))

@contextmanager
def encoder(fp_side:str|None=None, rotate_values:bool=False):
    "Scope in which the quantised tier keeps `fp_side` ('keys' or 'values') in fp16 and/or rotates only the values."
    enc, dec = C.encode_rows, C.decode_rows
    def spec_for(spec, is_key): return dataclasses.replace(spec, rotate=not is_key) if rotate_values and spec.bits else spec
    def fp(spec, is_key): return spec.bits is not None and fp_side == ('keys' if is_key else 'values')
    C.encode_rows = lambda x, heads, spec, is_key: C.Encoded(x.half()) if fp(spec, is_key) else enc(x, heads, spec_for(spec, is_key), is_key)
    C.decode_rows = lambda e, spec, is_key, D, dtype: e.data.to(dtype) if fp(spec, is_key) else dec(e, spec_for(spec, is_key), is_key, D, dtype)
    try: yield
    finally: C.encode_rows, C.decode_rows = enc, dec

VARIANTS = {'default': (C.Kivi(), {}), 'keys only': (C.Kivi(), dict(fp_side='values')),
            'values only': (C.Kivi(), dict(fp_side='keys')), 'values rotated': (C.Kivi(), dict(rotate_values=True)),
            'values in groups of 32': (SplitKivi(value_group=32), {}), 'keys in groups of 32': (SplitKivi(group=32), {}),
            'keys in groups of 32, values rotated': (SplitKivi(group=32), dict(rotate_values=True))}

if __name__ == '__main__':
    torch.set_num_threads(1)
    model, tok = load_model('smollm2-135m')
    windows = eval_windows(tokenize(tok, load_text('wikitext2')[0]), int(sys.argv[1]) if len(sys.argv) > 1 else 8, 1024)
    full = decode_ppl(model, windows, 'full')['ppl']
    for name, (strategy, scope) in VARIANTS.items():
        with encoder(**scope): r = decode_ppl(model, windows, strategy)
        print(f"{name}: PPL {r['ppl']:.3f} ({100 * (r['ppl'] / full - 1):+.2f} %), compression {r['compression']:.2f}x", flush=True)
