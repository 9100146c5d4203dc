"""Long generation: 1,024 greedy tokens after a 1k prompt, the cache compressed as generation goes, against FullKV.

For each text, the prompt is the first of protocol P's 8 windows of 1,024 tokens (`eval_windows`); nothing is chosen
from these runs. Per strategy: the tokens generated the same as FullKV's until the first difference, the share of
FullKV's tokens that are its argmax when FullKV's continuation is fed through its cache (teacher forcing), and the
mean NLL of FullKV's tokens against FullKV's own (`long_generation`). Writes OUT/results.json:
    python research/long_generation.py OUT NEW_TOKENS STRATEGY...
    python research/long_generation.py nbs/results/long-generation 1024 stratigraphic:ratio=4.0 kivi-3 stratigraphic:ratio=8.4
"""
import json, subprocess, sys, time
from pathlib import Path
import torch
from kvstrat import load_model, load_text
from kvstrat.core import eval_windows, tokenize
from kvstrat.protocol import continue_greedily, long_generation
if {'-h', '--help'} & set(sys.argv[1:]) or len(sys.argv) < 4: print(__doc__); sys.exit()

out, new_tokens, strategies = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
torch.set_num_threads(2)
model, tok = load_model('smollm2-135m')
commit = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
rows = []
for text in ('wikitext2', 'austen'):
    prompt = eval_windows(tokenize(tok, load_text(text)[0]), 8, 1024)[0]
    t0 = time.perf_counter()
    reference = continue_greedily(model, prompt, 'full', new_tokens)[:2]
    print(f'{text}: FullKV in {time.perf_counter() - t0:.0f} s, its mean NLL {reference[1].mean():.4f}', flush=True)
    for s in strategies:
        t0 = time.perf_counter()
        r = dict(text=text, **long_generation(model, prompt, s, new_tokens, reference), full_nll=reference[1].mean().item())
        print(f"  {s}: {r['compression']:.2f}x, the same {r['same_until']} tokens, argmax match {r['match']:.3f}, "
              f"ΔNLL {r['delta_nll']:+.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        rows.append(r)
out.mkdir(parents=True, exist_ok=True)
(out/'results.json').write_text(json.dumps(dict(command=' '.join(['python', *sys.argv]), commit=commit,
                                               model='smollm2-135m', prompt='window 0 of eval_windows(8, 1024)',
                                               new_tokens=new_tokens, rows=rows), indent=1) + '\n')
