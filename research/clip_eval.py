"""Protocol P with searched clipping ranges where the probe found them cheaper: a diagnosis, not a format.

    python research/clip_eval.py TEXT OUT.jsonl [RATIO...]   # default ratios 4.2 6.25 8.5; ~20 s a row on 2 cores

`research/clip_probe.py` measured, on the shipped calibration's windows only, what each layer's keys and values cost
alone at 3 and 2 bits with min-max ranges and with searched ones (`nbs/results/stratigraphic/clip-probe.txt`). Here
each (layer, keys or values, width) whose searched cost was lower there stores its rows with searched ranges; the
rest, the 4- and 8-bit formats and the plan (the shipped calibration's knapsack) stay as they are, so the bytes are
the default's to the byte. Each ratio runs as shipped and as searched, with FullKV, on the front's 8 windows of 1,024
tokens of TEXT; rows are written as `{strategy, arm, compression, window_nll, full_nll}`. `kvstrat.formats.quantize`
and `CompressedLayer.step` are replaced only inside `searched_where_cheaper()`.
"""
import sys, json, contextvars
from contextlib import contextmanager
from pathlib import Path
from unittest import mock
import torch
from kvstrat.core import eval_windows, load_model, load_text, tokenize
from kvstrat.cache import CompressedLayer
from kvstrat.protocol import decode_ppl, paired_delta
from clip_probe import quantize_searched
import kvstrat.quant as Q

PROBE = Path(__file__).parent.parent/'nbs/results/stratigraphic/clip-probe.txt'
layer_now = contextvars.ContextVar('layer_now', default=None)

def cheaper_searched() -> set:
    "(layer, 'K'|'V', bits) where the probe's searched ranges cost less than min-max."
    rows = [line.split() for line in PROBE.read_text().splitlines()[1:]]
    return {(int(l), kv, int(b)) for l, kv, b, plain, searched in rows if float(searched) < float(plain)}

@contextmanager
def searched_where_cheaper():
    where, step = cheaper_searched(), CompressedLayer.step
    def step_in_layer(self, *a, **kw): # the encoder learns which layer it stores for
        token = layer_now.set(self.layer_idx)
        try: return step(self, *a, **kw)
        finally: layer_now.reset(token)
    def quantize(x, bits, group, axis='token', symmetric=False, scale_bits=16):
        kv = 'K' if axis == 'channel' else 'V' # Stratigraphic's keys are grouped per channel, values per token
        use = quantize_searched if (layer_now.get(), kv, bits) in where else Q.quantize
        return use(x, bits, group, axis, symmetric, scale_bits)
    with mock.patch.object(CompressedLayer, 'step', step_in_layer), mock.patch('kvstrat.formats.quantize', quantize):
        yield

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 3: sys.exit(__doc__)
    torch.set_num_threads(2)
    text, out, ratios = sys.argv[1], Path(sys.argv[2]), [float(r) for r in sys.argv[3:]] or [4.2, 6.25, 8.5]
    model, tok = load_model('smollm2-135m')
    windows = eval_windows(tokenize(tok, load_text(text)[0]), 8, 1024) # the bench's windows: the front's
    full = decode_ppl(model, windows, 'full')['window_nll']
    with out.open('a') as f:
        for r in ratios:
            for arm in ('shipped', 'searched'):
                s = f'stratigraphic:ratio={r}'
                if arm == 'searched':
                    with searched_where_cheaper(): res = decode_ppl(model, windows, s)
                else: res = decode_ppl(model, windows, s)
                d, se = paired_delta(res['window_nll'], full)
                print(f'{text} {s} {arm}: {res["compression"]:.3f}x  dNLL {d:+.4f} ± {se:.4f}  '
                      f'dPPL {(res["ppl"] / full.mean().exp().item() - 1) * 100:+.2f} %', flush=True)
                f.write(json.dumps(dict(text=text, strategy=s, arm=arm, compression=res['compression'],
                                        window_nll=res['window_nll'].tolist(), full_nll=full.tolist())) + '\n')
