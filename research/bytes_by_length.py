"""Stored compression of one plan as the context grows: Stratigraphic at ratio 6, planned at 1,024 tokens, with tier 0
at 8 bits (today's default there) and at fp16, prefilled 1,024 tokens at a time to 4,096. The bytes follow from the
token counts alone, so the ids are random. Prints each length's compression and tier 0's share of the fp16 bytes:
    python research/bytes_by_length.py
"""
import sys
import torch
from kvstrat.stratigraphic import *
if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
torch.set_num_threads(2)
m, _ = load_model('smollm2-135m')
ids = torch.randint(100, 20000, (1, 4096), generator=torch.Generator().manual_seed(0))
for s in (Stratigraphic(ratio=6), Stratigraphic(ratio=6, top_bits=16)): # tier 0 at 8 bits, then at fp16
    cache = CompressedCache(m, s)
    out = []
    with torch.inference_mode(), cache.attached(m):
        for i in range(0, 4096, 1024):
            m(ids[:, i:i + 1024], cache=cache, use_cache=True, logits_to_keep=1)
            L, fp16 = i + 1024, cache.fp16_nbytes()
            tier0 = sum(layer.store.tiers[0].nbytes() for layer in cache.layers) # every stored tensor of tier 0
            out.append(f"{L}: {fp16 / cache.nbytes():.3f}x, tier 0 {tier0 / fp16 * 100:.1f} % of fp16")
    print(f'top_bits={s.top_bits}, plain_eviction={s.plain_eviction}:', ' | '.join(out))
