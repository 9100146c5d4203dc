"""Write a text of 4 WikiText-2 test windows of 4,096 tokens that no calibration window touches.

Streaming-head calibration windows (stage 1: 2 x 1,024 tokens; stage 2: 16 x 512 or 16 x 1,024) avoid the 1,024-token
evaluation windows of protocol P, not longer ones; Stratigraphic's precision calibration (`kvstrat-calibrate`: 2 x 320
tokens for the widths, 2 x 1,024 for eviction) avoids protocol P's 1k and 4k windows, not these. Long-context
protocol-P runs read this file instead:
    python research/long_context_text.py OUT.txt
    kvstrat-bench --text OUT.txt --protocol ppl --windows 4 --prefill 3584 --score 512 --batch 1 ...
"""
import sys
import torch
from kvstrat.core import load_model, load_text, tokenize
from kvstrat.calibration import calibration_windows

def free_windows(taken:torch.Tensor, L:int) -> list[int]:
    "Starts of consecutive `L`-token windows that touch no `taken` token."
    free, s = [], 0
    while s + L <= len(taken):
        if taken[s:s + L].any(): s += int(taken[s:s + L].nonzero()[-1]) + 1
        else: free.append(s); s += L
    return free

def calibration_taken(ids:torch.Tensor) -> torch.Tensor:
    "(N,) bool: the tokens any shipped calibration read, the streaming heads' or precision's."
    used = torch.zeros(len(ids), dtype=torch.bool)
    for count, length in ((2, 1024), (16, 512), (16, 1024)): # the streaming heads'
        for s in calibration_windows(ids, count, length)[1]: used[s:s + length] = True
    for count, length in ((2, 320), (2, 1024)): # precision's, as `kvstrat-calibrate` chooses them (copy_windows)
        for s in calibration_windows(ids, count, length, eval_length=(1024, 4096))[1]: used[s:s + length] = True
    return used

def long_windows(ids:torch.Tensor, L:int=4096, n:int=4) -> list[int]:
    "Starts of the `n` long evaluation windows: spread over the windows no calibration window touches."
    free = free_windows(calibration_taken(ids), L)
    print(len(ids), 'tokens;', len(free), f'free {L}-windows')
    return [free[i] for i in torch.linspace(0, len(free) - 1, n).round().long().tolist()]

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    _, tok = load_model('smollm2-135m')
    ids = tokenize(tok, load_text('wikitext2')[0])
    pick = long_windows(ids)
    print('picked starts', pick)
    text = '\n'.join(tok.decode(ids[p:p + 4096]) for p in pick)
    open(sys.argv[1], 'w', encoding='utf-8').write(text)
    print(len(tokenize(tok, text)), 'tokens in the file')
