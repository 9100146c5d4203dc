"""Write a text of 4 WikiText-2 test windows of 4,096 tokens that no streaming-head calibration window touches.

Calibration windows (stage 1: 2 x 1,024 tokens; stage 2: 16 x 512 or 16 x 1,024) avoid the 1,024-token evaluation
windows of protocol P, not longer ones; long-context protocol-P runs read this file instead:
    python scripts/long_context_text.py OUT.txt
    kvstrat-bench --text OUT.txt --protocol ppl --windows 4 --prefill 3584 --score 512 --batch 1 ...
"""
import sys
import torch
from kvstrat.core import load_model, load_text, tokenize
from kvstrat.calibration import calibration_windows
_, tok = load_model('smollm2-135m')
ids = tokenize(tok, load_text('wikitext2')[0]); N = len(ids)
used = torch.zeros(N, dtype=torch.bool)
for n, L in ((2, 1024), (16, 512), (16, 1024)):
    _, starts = calibration_windows(ids, n, L)
    for s in starts: used[s:s + L] = True
L, free = 4096, []
s = 0
while s + L <= N:
    if used[s:s + L].any(): s += int(used[s:s + L].nonzero()[-1]) + 1
    else: free.append(s); s += L
print(N, 'tokens;', len(free), 'free 4096-windows')
pick = [free[i] for i in torch.linspace(0, len(free) - 1, 4).round().long().tolist()]
print('picked starts', pick)
text = '\n'.join(tok.decode(ids[p:p + L]) for p in pick)
open(sys.argv[1], 'w', encoding='utf-8').write(text)
print(len(tokenize(tok, text)), 'tokens in the file')
