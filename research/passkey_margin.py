"""How near each passkey trial is to lost: the key's NLL and its first token's logit margin, per strategy.

    python research/passkey_margin.py OUT.json STRATEGY ...  # FullKV first, then each; the bench's grid, ~2 min each

`kvstrat-bench --protocol passkey` scores a trial right or wrong from its greedy answer. Here the key is fed after the
question instead (teacher-forced, through the same compressed cache), and each trial prints the key tokens' summed
NLL and the first key token's logit minus the best other token's: a trial with a margin near 0 under FullKV is one
that any small change to the cache can flip either way, so right-or-wrong there says little about the strategy.

`stratigraphic-plan-of` stores tier 0 at `top_bits` with the plan that `plan_top_bits` makes, to tell a plan's part
from a format's. A diagnosis, not a compressor.
"""
import json, sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar
import torch
from kvstrat.bench import load_bench_model, passkey_cases
from kvstrat.cache import CompressedCache, prefill_cache
from kvstrat.core import load_text, tokenize
from kvstrat.policy import make_strategy, register
from kvstrat.stratigraphic import Stratigraphic

@register
@dataclass
class PlanOf(Stratigraphic):
    "`stratigraphic` with tier 0 at `top_bits` and the plan `plan_top_bits` makes."
    name: ClassVar[str] = 'stratigraphic-plan-of'
    plan_top_bits: int = 16 # the tier-0 width the knapsack prices

    def prepare(self, spec, heads=None):
        return Stratigraphic.prepare(replace(self, top_bits=self.plan_top_bits), spec, heads)

@torch.no_grad()
def key_margin(model, tok, case, strategy) -> tuple[float, float]:
    "The key's summed NLL after the question, and its first token's logit margin over the best other token."
    key = tokenize(tok, ' ' + case.key) # as the bench encodes the key
    cache = CompressedCache(model, make_strategy(strategy))
    with cache.attached(model):
        prefill_cache(model, cache, case.haystack[None], logits_to_keep=1)
        logits = model(torch.cat([case.question, key])[None], cache=cache, use_cache=True).logits[0].float()
    logits = logits[len(case.question) - 1:-1] # (len(key), V): each predicts the next key token
    nll = -logits.log_softmax(-1).gather(1, key[:, None]).sum().item()
    first = logits[0].clone(); right = first[key[0]].item(); first[key[0]] = -float('inf')
    return nll, right - first.max().item()

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 3: sys.exit(__doc__)
    torch.set_num_threads(2)
    model, tok = load_bench_model('smollm2-135m')
    cases = passkey_cases(tok, tokenize(tok, load_text('wikitext2')[0]), [1024, 2048, 4096], [0.1, 0.5, 0.9], 2)
    out = dict(trials=[dict(length=c.length, depth=c.depth, key=c.key) for c in cases], strategies={})
    for s in ['full', *sys.argv[2:]]:
        got = out['strategies'][s] = [key_margin(model, tok, c, s) for c in cases] # [(key NLL, margin)] per trial
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
        print(s, '\n ', ' '.join(f'{c.length // 1024}k/{c.depth}:{n:.3f}/{m:+.3f}' for c, (n, m) in zip(cases, got)))
        print(f'  summed key NLL {sum(n for n, _ in got):.3f}, smallest margin {min(m for _, m in got):+.3f}, '
              f'{sum(m > 0 for _, m in got)}/{len(got)} first tokens right', flush=True)
