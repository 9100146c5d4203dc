"""µs per decode step of one SmolLM2 layer's cache at 2k tokens of random keys and values, split into its three parts: storing the new row
(`LayerStore.write`), attention from the tiers (`tiered_read`) and the strategy's placement (`CompressedLayer.place`).

    python research/layer_step_profile.py int8 [CONTEXT] [STEPS]

KVSTRAT_KERNELS=0 measures the same steps with the torch read (no CPU kernels).
"""
import sys, time
import torch
from kvstrat.adapter import ModelSpec
from kvstrat.attention import tiered_read
from kvstrat.cache import CompressedCache
from kvstrat.core import load_model
from kvstrat.policy import make_strategy

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    torch.set_num_threads(1)
    model = load_model('smollm2-135m')[0]
    layer = CompressedCache(model, make_strategy(sys.argv[1])).layers[0]
    spec = ModelSpec.of(model)
    H, Hq, D, T = spec.n_kv_heads, spec.n_heads, spec.head_dim, int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    torch.manual_seed(0)
    with torch.inference_mode():
        k, v = torch.randn(1, H, T, D), torch.randn(1, H, T, D)
        layer.update(k, v); layer.store.write(k, v); layer.place(None, None, None)
        def step():
            t0 = time.perf_counter(); layer.store.write(torch.randn(1, H, 1, D), torch.randn(1, H, 1, D))
            qpos = torch.tensor([layer.store.seen - 1])
            t1 = time.perf_counter(); tiered_read(torch.randn(1, Hq, 1, D), layer.store, qpos, D ** -0.5)
            t2 = time.perf_counter(); layer.place(None, None, None)
            return t1 - t0, t2 - t1, time.perf_counter() - t2
        for _ in range(20): step()
        us = (torch.tensor([step() for _ in range(steps)]) * 1e6).median(0).values.tolist()
    print(f'{sys.argv[1]}: write {us[0]:.0f} µs, attention {us[1]:.0f} µs, after attention {us[2]:.0f} µs (medians of {steps} steps)')
