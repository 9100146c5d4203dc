"""Which windows of an N-window protocol-P run no earlier choice has read: for rules fixed before their run.

A window counts as read if it shares a token with a window of the 1-, 2-, 4-, 8-, 16-, 20-, 24-, 32-, 40-, 44-, 48-
or 56-window runs every earlier result used, with one of the 8-window runs of 4,096 tokens (`strat-4k-8w-*`), with any
shipped calibration window (precision's and the streaming heads'), from the 56-window run on, with the 16 calibration
windows of 1,024 tokens per text that `eviction_sim.py` read before it, or, on WikiText-2, with a 4,096-token window
`long_context_text.py` writes now or wrote before. Prints each text's unread window indices; with OUT=, it also
writes them, with the counts it took as read, to a JSON file that a rule's checks read
(`nbs/results/unread-windows/`; its `command` reproduces it at the commit that added it, before its own run joined
`EARLIER_COUNTS`). READ= and READ_LONG= replace the counts taken as read, to write an older rule's list again
(20.json: `READ=1,2,4,8,16 READ_LONG=`, the runs before 2026-12-04's 20-window rule):
    python research/unread_windows.py 32
    python research/unread_windows.py OUT=nbs/results/unread-windows/32.json 32
"""
import json, sys
import torch
from kvstrat.core import eval_windows, load_model, load_text, tokenize
from kvstrat.calibration import calibration_windows
from long_context_text import calibration_taken, long_windows

# the --windows of every protocol-P run of 1,024 tokens before
EARLIER_COUNTS = (1, 2, 4, 8, 16, 20, 24, 32, 40, 44, 48, 52, 56)
READ_WITH = {56: ((16, 1024),)} # `eviction_sim.py`'s calibration windows, read before the 56-window run
EARLIER_LONG_COUNTS = (8,) # ... and of 4,096 tokens, on both texts (`--prefill 3584 --score 512`)
OLD_LONG_STARTS = (2048, 96024, 200522, 295198) # the 4k windows long_context_text.py wrote before 2026-12-02

def starts(n_tokens:int, n:int, L:int) -> list[int]:
    "Where `eval_windows` starts its `n` windows of `L` tokens in a text of `n_tokens`."
    return eval_windows(torch.arange(n_tokens), n, L)[:, 0].tolist()

def unread(ids:torch.Tensor, n:int, L:int=1024, long:bool=False,
           counts=EARLIER_COUNTS, long_counts=EARLIER_LONG_COUNTS) -> list[int]:
    "Indices of the `n`-window run's windows that touch no token an earlier run or a calibration read."
    taken = calibration_taken(ids)
    for W in counts:
        for s in starts(len(ids), W, L): taken[s:s + L] = True
        for n_cal, cal_length in READ_WITH.get(W, ()): # calibration windows first read beside that run
            for s in calibration_windows(ids, n_cal, cal_length, eval_length=(1024, 4096))[1]:
                taken[s:s + cal_length] = True
    for W in long_counts:
        for s in starts(len(ids), W, 4096): taken[s:s + 4096] = True
    for s in (*OLD_LONG_STARTS, *long_windows(ids)) if long else (): taken[s:s + 4096] = True
    return [j for j, s in enumerate(starts(len(ids), n, L)) if not taken[s:s + L].any()]

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    opts = dict(a.split('=', 1) for a in sys.argv[1:] if '=' in a)
    if unknown := set(opts) - {'OUT', 'READ', 'READ_LONG'}: sys.exit(f"unknown option(s) {sorted(unknown)}: "
                                                                      "use OUT=, READ= or READ_LONG=")
    counts_of = lambda key, default: tuple(int(c) for c in opts[key].split(',') if c) if key in opts else default
    counts, long_counts = counts_of('READ', EARLIER_COUNTS), counts_of('READ_LONG', EARLIER_LONG_COUNTS)
    out, ns = opts.get('OUT'), [int(a) for a in sys.argv[1:] if '=' not in a]
    _, tok = load_model('smollm2-135m')
    found = {} # text -> {n: unread window indices}
    for text in ('wikitext2', 'austen'):
        ids = tokenize(tok, load_text(text)[0])
        found[text] = {n: unread(ids, n, long=text == 'wikitext2', counts=counts, long_counts=long_counts) for n in ns}
        for n, windows in found[text].items(): print(text, n, windows)
    if out:
        with open(out, 'w') as f:
            json.dump(dict(what='indices of the windows of an N-window protocol-P run (1,024 tokens) that no earlier '
                                'run or calibration read', earlier_counts=counts,
                           earlier_long_counts=long_counts, windows=found,
                           command='python research/unread_windows.py ' + ' '.join(sys.argv[1:])), f, indent=1)
