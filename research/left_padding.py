"""How far a row of a batch is from the same prompt run alone, per strategy: left-padded, and in a batch of equal rows.

Two Austen prompts (448 and 512 tokens, or 448 and 448 with PAD=0) run as one batch, the shorter left-padded with
position ids as `generate` derives them from the mask, then 16 decode steps teacher-forced on the same continuation;
the shorter prompt also runs alone. Prints, over the 16 steps' next-token logits, the largest |difference|, how often
the argmax agrees, and the mean KL(alone || batched) (research diary, 2026-12-05):
    python research/left_padding.py 64 full int8 int4 kivi stratigraphic hybrid streamingllm h2o      # PAD STRATEGY...
"""
import sys
import torch
import torch.nn.functional as F
from kvstrat.cache import CompressedCache
from kvstrat.core import load_model, load_text, tokenize

STEPS = 16

@torch.inference_mode()
def next_token_logits(model, cache, x, mask, continuation): # (B, T), (B, T), (STEPS,) -> (B, STEPS, V)
    out, pos = [], (mask.cumsum(-1) - 1).clamp(min=0) # a padded row's tokens from position 0, as `generate` does
    with cache.attached(model):
        r = model(x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1)
        for t in continuation:
            out.append(r.logits[:, -1].float())
            mask, pos = torch.cat([mask, torch.ones_like(mask[:, :1])], 1), pos[:, -1:] + 1
            r = model(t.repeat(len(x), 1), attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
    return torch.stack(out, 1)

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 3 or not sys.argv[1].isdigit(): sys.exit(f'usage: PAD STRATEGY...\n{__doc__}')
    pad, strategies = int(sys.argv[1]), sys.argv[2:]
    torch.set_num_threads(2)
    model, tok = load_model('smollm2-135m')
    ids = tokenize(tok, load_text('austen')[0])
    short, continuation = ids[20_000:20_448], ids[30_000:30_000 + STEPS]
    batch = torch.stack([ids[10_000:10_448 + pad], torch.cat([torch.zeros(pad, dtype=torch.long), short])])
    mask = torch.ones_like(batch); mask[1, :pad] = 0
    for s in strategies:
        batched = next_token_logits(model, CompressedCache(model, s), batch, mask, continuation)[1]
        alone = next_token_logits(model, CompressedCache(model, s), short[None], torch.ones_like(short[None]),
                                  continuation)[0]
        kl = F.kl_div(batched.log_softmax(-1), alone.log_softmax(-1), log_target=True, reduction='none').sum(-1).mean()
        print(f'{s}: max |Δlogit| {(batched - alone).abs().max():.4f}, argmax agrees '
              f'{(batched.argmax(-1) == alone.argmax(-1)).float().mean():.2f}, KL {kl.item():.5f}', flush=True)
