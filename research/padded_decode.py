"""What left padding costs a batch's generation, per strategy: four Austen prompts of 512, 490, 470 and 448 tokens,
left-padded to 512, against four of 512 tokens unpadded; greedy `generate` of 32 tokens each, 2 threads, the median of 3
runs of each after a short warm-up (research diary, 2026-12-05; a scratch measure, not the bench's paired protocol):
    python research/padded_decode.py full kivi stratigraphic hybrid h2o      # STRATEGY...
"""
import sys, time, statistics
import torch
from kvstrat.cache import CompressedCache
from kvstrat.core import load_model, load_text, tokenize

LENGTHS, STEPS = (512, 490, 470, 448), 32

@torch.inference_mode()
def generate_seconds(model, strategy:str, ids, mask) -> float: # (B, T) ×2
    cache = CompressedCache(model, strategy)
    with cache.attached(model):
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, cache=cache, max_new_tokens=STEPS, min_new_tokens=STEPS,
                       do_sample=False, pad_token_id=0)
        return time.perf_counter() - start

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 2: sys.exit(f'usage: STRATEGY...\n{__doc__}')
    torch.set_num_threads(2)
    model, tok = load_model('smollm2-135m')
    ids = tokenize(tok, load_text('austen')[0])
    prompts = [ids[10_000 * (i + 1):10_000 * (i + 1) + max(LENGTHS)] for i in range(len(LENGTHS))]
    padded, mask = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long), torch.zeros(len(LENGTHS), max(LENGTHS))
    for i, n in enumerate(LENGTHS): padded[i, -n:], mask[i, -n:] = prompts[i][:n], 1
    equal = torch.stack(prompts)
    for s in sys.argv[1:]:
        generate_seconds(model, s, equal[:, :64], torch.ones_like(equal[:, :64])) # warm-up
        t_padded = statistics.median(generate_seconds(model, s, padded, mask.long()) for _ in range(3))
        t_equal = statistics.median(generate_seconds(model, s, equal, torch.ones_like(equal)) for _ in range(3))
        print(f'{s}: padded {t_padded:.2f} s, unpadded {t_equal:.2f} s, ratio {t_padded / t_equal:.2f}', flush=True)
