"""Stage 1 fitted, and the heads ranked by its MSE, on 2 calibration windows of 4,096 tokens that touch neither
protocol P's evaluation windows nor the 4k evaluation windows of research/long_context_text.py (which
`kvstrat.calibration.calibration_windows` does not avoid); writes a calibration directory without adapters.

    python research/stage1_long_windows.py DIR
    kvstrat-bench --text long.txt --protocol ppl --windows 2 --prefill 3584 --score 512 --batch 1 \
        --strategies full streaming:calibration=DIR,lora=False --out OUT
"""
import sys, json, torch
from pathlib import Path
torch.set_num_threads(1)
from kvstrat.core import load_model, load_text, tokenize, ModelSpec
from kvstrat.calibration import fit_stage1, mse_pattern
from long_context_text import free_windows, long_windows # research/
if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
model, tok = load_model('smollm2-135m')
ids = tokenize(tok, load_text('wikitext2')[0]); N = len(ids)
L, SINKS, WINDOW, STEPS = 4096, 4, 64, 40 # the shipped calibration's sinks, window and stage-1 steps
taken = torch.zeros(N, dtype=torch.bool)
for W in (1, 2, 4, 8, 16): # protocol P's evaluation windows, as calibration_windows avoids them
    for p in (torch.linspace(0, N - 1024, W).long().tolist() if W > 1 else [0]): taken[p:p + 1024] = True
long_eval = long_windows(ids, L)
for p in long_eval: taken[p:p + L] = True
cand = free_windows(taken, L)
pick = [cand[i] for i in torch.linspace(0, len(cand) - 1, 2).round().long().tolist()]
print('4k eval starts', long_eval, 'calibration starts', pick, flush=True)
windows = torch.stack([ids[p:p + L] for p in pick])
params, report = fit_stage1(model, windows, SINKS, WINDOW, STEPS)
spec = ModelSpec.of(model)
params.save(out/'params.json', spec)
mse_pattern(torch.tensor(report['mse_stage1']), SINKS, WINDOW).save(out/'pattern', spec)
report.update(windows=list(windows.shape), window_starts=pick, classifier='mse', adapters={})
(out/'report.json').write_text(json.dumps(report, indent=1))
