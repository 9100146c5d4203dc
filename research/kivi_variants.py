"""KIVI variants for DIARY.md: attention sinks, group sizes, residual, per-token keys, 8-bit scales; and where the loss comes from.

    python research/kivi_variants.py [WINDOWS [MATCH]]   # protocol P, 8 windows by default; the variants whose
                                                        # description contains MATCH (all by default)

Each variant prints its ΔPPL with the paired standard error over windows, and its measured compression. Two scopes
the library does not expose swap the cache's row encoder (and restore it): one side left in fp16 to attribute the
loss, or only the values rotated.
"""
import dataclasses, sys
from contextlib import contextmanager
import torch
import kvstrat.formats as F, kvstrat.store as C
from kvstrat.core import load_model, load_text, tokenize, eval_windows
from kvstrat.protocol import decode_ppl

@contextmanager
def encoder(fp_side:str|None=None, rotate_values:bool=False):
    "Scope in which the quantised tier keeps `fp_side` ('keys' or 'values') in fp16 and/or rotates only the values."
    enc, dec = C.encode_rows, C.decode_rows
    def spec_for(spec, is_key): return dataclasses.replace(spec, rotate=not is_key) if rotate_values and spec.bits else spec
    def fp(spec, is_key): return spec.bits is not None and fp_side == ('keys' if is_key else 'values')
    C.encode_rows = lambda x, heads, spec, is_key: C.Encoded(x.half()) if fp(spec, is_key) else enc(x, heads, spec_for(spec, is_key), is_key)
    C.decode_rows = lambda e, spec, is_key, D, dtype: e.data.to(dtype) if fp(spec, is_key) else dec(e, spec_for(spec, is_key), is_key, D, dtype)
    F.encode_rows, F.decode_rows = C.encode_rows, C.decode_rows # the formats' own calls (encode_pair's) too
    try: yield
    finally: C.encode_rows, C.decode_rows = F.encode_rows, F.decode_rows = enc, dec

OLD = 'kivi:group=64,value_group=64,residual=16,sinks=0' # the defaults before 2026-11-30
TOKEN = 'kivi:key_axis=token,rotate=True,symmetric=True' # per-token keys: nothing waits in fp16 for a key group
VARIANTS = [ # (what, strategy, encoder scope)
    ('old defaults', OLD, {}), ('old, keys only', OLD, dict(fp_side='values')), ('old, values only', OLD, dict(fp_side='keys')),
    ('old, values rotated', OLD, dict(rotate_values=True)),
    ('old + 1 sink', 'kivi:group=64,value_group=64,residual=16,sinks=1', {}),
    ('old + 4 sinks', 'kivi:group=64,value_group=64,residual=16,sinks=4', {}),
    ('old + 4 sinks, residual 12', 'kivi:group=64,value_group=64,residual=12,sinks=4', {}),
    ('key groups of 32, no sinks', 'kivi:residual=16,sinks=0', {}),
    ('key groups of 32, 4 sinks, residual 16', 'kivi:residual=16', {}),
    ('key groups of 32, 4 sinks, residual 28', 'kivi:residual=28', {}),
    ('defaults (key groups of 32, 4 sinks, residual 12)', 'kivi', {}),
    ('per-token keys, asymmetric, residual 0', 'kivi:key_axis=token,rotate=True,group=64,residual=0', {}),
    ('per-token keys, symmetric g32, values g32, residual 0', f'{TOKEN},group=32,value_group=32,residual=0', {}),
    ('per-token keys, symmetric g32, residual 12', f'{TOKEN},group=32,residual=12', {}),
    ('per-token keys, symmetric g64, residual 12', f'{TOKEN},group=64,residual=12', {}),
    ('per-token keys, symmetric g32, 8-bit scales', f'{TOKEN},group=32,scale_bits=8', {}),
    ('per-token keys, symmetric g32, values g32, 8-bit scales', f'{TOKEN},group=32,value_group=32,scale_bits=8', {}),
    ('per-token keys, symmetric g16, 8-bit scales', f'{TOKEN},group=16,scale_bits=8', {}),
    ('per-token keys, symmetric g16, values g32, 8-bit scales', f'{TOKEN},group=16,value_group=32,scale_bits=8', {}),
    ('per-token keys, symmetric g16, 8-bit scales, residual 10', f'{TOKEN},group=16,scale_bits=8,residual=10', {}),
    ('per-token keys, symmetric g16, 8-bit scales, residual 8', f'{TOKEN},group=16,scale_bits=8,residual=8', {}),
    ('per-token keys, symmetric g16, 8-bit scales, residual 4', f'{TOKEN},group=16,scale_bits=8,residual=4', {}),
    ('defaults with 8-bit scales', 'kivi:scale_bits=8', {}),
    ('kivi-2, old defaults', 'kivi:bits=2,group=64,value_group=64,residual=16,sinks=0', {}),
    ('kivi-2, defaults', 'kivi:bits=2', {})]

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(1)
    model, tok = load_model('smollm2-135m')
    windows = eval_windows(tokenize(tok, load_text('wikitext2')[0]), int(sys.argv[1]) if len(sys.argv) > 1 else 8, 1024)
    full = decode_ppl(model, windows, 'full')
    match = sys.argv[2] if len(sys.argv) > 2 else ''
    for what, spec, scope in (v for v in VARIANTS if match in v[0]):
        with encoder(**scope): r = decode_ppl(model, windows, C.make_strategy(spec))
        d = r['window_nll'] - full['window_nll']
        print(f"{what} ({spec}): PPL {r['ppl']:.3f} ({100 * (r['ppl'] / full['ppl'] - 1):+.2f} % ± {100 * d.std() / len(d) ** 0.5:.2f}), "
              f"compression {r['compression']:.3f}x", flush=True)
