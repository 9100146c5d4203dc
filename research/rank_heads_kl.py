"""Rank the KV heads by what streaming each one alone costs the model: the KL from the full model's next-token
distribution to the model in which only that head streams (its stage-1 state from the shipped calibration),
teacher-forced on the 2 calibration windows of 1,024 tokens, over positions past sinks + window. Writes a head
pattern (DuoAttention format; the lowest KL streams first). This made `kvstrat/data/streaming-smollm2-135m/pattern-kl`:

    python research/rank_heads_kl.py kvstrat/data/streaming-smollm2-135m/pattern-kl     # ≈ 8 min at 2 threads
"""
import sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(2)
from pathlib import Path
from kvstrat.core import load_model, load_text, tokenize, ModelSpec
from kvstrat.calibration import calibration_windows
from kvstrat.linear_attention import StreamParams, hybrid_override
from kvstrat.streaming import HeadPattern
if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
model, tok = load_model('smollm2-135m'); spec = ModelSpec.of(model)
ids = tokenize(tok, load_text('wikitext2')[0])
windows, _ = calibration_windows(ids, 2, 1024)
cal = Path('kvstrat/data/streaming-smollm2-135m')
params = StreamParams.load(cal/'params.json', spec)
past = params.sinks + params.window # positions with something folded
with torch.no_grad():
    ref = F.log_softmax(model(windows).logits[:, past:].float(), -1)
    kl = torch.zeros(spec.n_layers, spec.n_kv_heads)
    t = time.time()
    for l in range(spec.n_layers):
        for h in range(spec.n_kv_heads):
            mask = torch.zeros(spec.n_layers, spec.n_kv_heads, dtype=torch.bool); mask[l, h] = True
            with hybrid_override(model, mask, params):
                lp = F.log_softmax(model(windows).logits[:, past:].float(), -1)
            kl[l, h] = F.kl_div(lp, ref, log_target=True, reduction='none').sum(-1).mean()
        print(l, kl[l].tolist(), f'{time.time() - t:.0f}s', flush=True)
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
HeadPattern(kl / kl.max(), params.sinks, params.window, 'KL of the model when the head alone streams (stage-1 state)').save(out, spec)
