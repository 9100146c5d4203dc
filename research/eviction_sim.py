"""What Stratigraphic's evicting heads lose, and what two other eviction rules would: a scratch measurement on
calibration windows only (`calibration_set`: WikiText-2 and Austen, with passages to copy, disjoint from every
evaluation window). It decides whether a rule is worth building; it is not a result of the library.

Teacher-forced, but chunked as protocol P: a 512-token prefill read exactly, then chunks of 16 tokens, each reading
what its head kept after the chunk before. The evicting heads of `Stratigraphic(ratio=R)`'s plan change; every other
head reads exact keys and values, so the figures are the evicting heads' share alone, at fp16. Each kept set holds the
4 sinks and 128 other rows, as the plan's window does at 6.4 (the windows' own quantisation is left out). Arms:
- `window`: the newest 128, as the store keeps them;
- `kept:R[,K]`: the newest R and the K - R the head attended most (attention summed over the queries of its group
  since the prefill, H2O's score), one way: a row evicted never returns. K (default 128) is what it keeps after each
  chunk: a head that drops in groups of G at decode holds 128 - G + 1 rows right after a drop, at most 128;
- `merged:G,B`: the window, and one row per evicted run of G tokens, their mean key and value, its logit raised by
  B·log G (B=1: the run's mass, as if its keys were equal).
Prints per arm: ΔNLL against exact attention (mean, paired SE, worst window) over the scored 512 tokens, the KL, and
the ΔNLL against the first arm named (mean, paired SE).
    python research/eviction_sim.py RATIO WINDOWS_PER_TEXT ARM...   # ~40 s per arm and window pair on 2 threads
"""
import sys, json, math
import torch
from transformers import AttentionInterface
from kvstrat.core import load_model
from kvstrat.adapter import ModelSpec
from kvstrat.sensitivity import kept_rows
from kvstrat.measure import calibration_set
from kvstrat.stratigraphic import Stratigraphic

SINKS, KEPT, PREFILL, CHUNK = 4, 128, 512, 16

def merged_rows(key:torch.Tensor, value:torch.Tensor, group:int, # (B, H, T, D) one head's group of query heads
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    "Each run of `group` tokens past the sinks as one row: mean key, mean value (B, H, G, D), its last position (G,)."
    B, H, T, D = key.shape
    n = (T - SINKS) // group
    runs = lambda x: x[:, :, SINKS:SINKS + n * group].reshape(B, H, n, group, D).mean(3)
    return runs(key), runs(value), SINKS + (torch.arange(n) + 1) * group - 1

def head_chunks(q, k, v, scaling, arm:str, params:list[float]) -> torch.Tensor: # (B, rep, T, D) output of the head
    "One evicting head's attention, chunk by chunk, under `arm`; the prefill reads exactly."
    T = q.shape[2]; t = torch.arange(T)
    causal = t[None, :] <= t[:, None]
    scores = (q @ k.transpose(-1, -2)) * scaling # (B, rep, T, T)
    out = torch.softmax(scores.masked_fill(~causal, -math.inf), -1) @ v
    received = out.new_zeros(q.shape[0], T)
    received[:, :PREFILL] = torch.softmax(scores[:, :, :PREFILL, :PREFILL].masked_fill(
        ~causal[:PREFILL, :PREFILL], -math.inf), -1).sum((1, 2))
    recent = int(params[0]) if arm == 'kept' else KEPT
    kept = int(params[1]) if arm == 'kept' and len(params) > 1 else KEPT
    held = kept_rows(received, torch.ones_like(received, dtype=torch.bool), PREFILL, SINKS, kept, recent)
    if arm == 'merged': kbar, vbar, last = merged_rows(k, v, int(params[0]))
    for c0 in range(PREFILL, T, CHUNK):
        c1 = min(c0 + CHUNK, T)
        visible = (held[:, None, None] | ((t >= c0) & (t < c1))) & causal[c0:c1] # (B, 1, n, T)
        s = scores[:, :, c0:c1].masked_fill(~visible, -math.inf)
        if arm == 'merged': # runs wholly evicted before the chunk
            m = (q[:, :, c0:c1] @ kbar.transpose(-1, -2)) * scaling + params[1] * math.log(params[0])
            m = m.masked_fill(~(last < c0 - KEPT), -math.inf)
            p = torch.softmax(torch.cat([s, m], -1), -1)
            out[:, :, c0:c1] = p[..., :T] @ v + p[..., T:] @ vbar
        else:
            p = torch.softmax(s, -1)
            out[:, :, c0:c1] = p @ v
        received += p[..., :T].sum((1, 2))
        held = kept_rows(received, held | ((t >= c0) & (t < c1)), c1, SINKS, kept, recent)
    return out

def simulated(evicting:dict, arm:str|None, params:list[float]):
    "An attention function: exact, except `evicting[layer]`'s KV heads under `arm` (None: exact everywhere)."
    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        rep = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(rep, 1), value.repeat_interleave(rep, 1) # (B, Hq, T, D)
        T = query.shape[2]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        out = torch.softmax(((query @ k.transpose(-1, -2)) * scaling).masked_fill(~causal, -math.inf), -1) @ v
        for h in (evicting.get(module.layer_idx, []) if arm else []):
            at = slice(h * rep, (h + 1) * rep)
            out[:, at] = head_chunks(query[:, at].float(), k[:, at].float(), v[:, at].float(), scaling, arm, params)
        return out.transpose(1, 2).contiguous(), None
    return attend

@torch.no_grad()
def scored(model, windows:torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    "Per window NLL of the scored tokens (W,), and their log-probabilities (W, 512, vocab)."
    nll, logp = [], []
    for w in windows.split(2):
        lp = model(w).logits[:, PREFILL - 1:-1].float().log_softmax(-1)
        nll.append(-lp.gather(-1, w[:, PREFILL:, None]).squeeze(-1).mean(1)); logp.append(lp)
    return torch.cat(nll), torch.cat(logp)

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 4: sys.exit(__doc__)
    ratio, per_text, arms = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(2)
    model, tok = load_model('smollm2-135m', None)
    plan = Stratigraphic(ratio=ratio).prepare(ModelSpec.of(model))
    evicting = {}
    for layer, head in plan.windowed.nonzero().tolist(): evicting.setdefault(layer, []).append(head)
    windows = calibration_set(tok, ['wikitext2', 'austen'], per_text, 1024, 128)
    model.config._attn_implementation = 'eviction_sim'
    AttentionInterface.register('eviction_sim', simulated(evicting, None, []))
    exact_nll, exact_logp = scored(model, windows)
    first = None # the first arm's NLL: each later arm is also paired with it
    for spec in arms:
        arm, _, args = spec.partition(':')
        AttentionInterface.register('eviction_sim', simulated(evicting, arm, [float(a) for a in args.split(',') if a]))
        nll, logp = scored(model, windows)
        d, first = nll - exact_nll, nll if first is None else first
        vs_first = nll - first
        kl = (exact_logp.exp() * (exact_logp - logp)).sum(-1).mean().item()
        se = lambda x: round(x.std().item() / len(x) ** .5, 5) # paired standard error over windows
        print(json.dumps(dict(arm=spec, heads=int(plan.windowed.sum()), windows=len(d), dnll=round(d.mean().item(), 5),
                              se=se(d), worst=round(d.max().item(), 4), kl=round(kl, 5),
                              vs_first=round(vs_first.mean().item(), 5),
                              vs_first_se=se(vs_first),
                              per_window=[round(x, 4) for x in d.tolist()])), flush=True)
