"Properties of kvstrat.architectures checked on random tiny decoders (the notebook holds the worked examples)."
import pytest, torch
from kvstrat.architectures import ATTN_TYPES, Decoder, KVCache, arch_configs, generate, kv_values_per_token

TINY = dict(vocab=64, d_model=32, n_layers=2, n_heads=4, head_dim=8, n_kv_heads=2, d_c=16, d_r=4, d_ff=64, max_len=128)

def test_original_kv_sizes():
    assert {a: kv_values_per_token(c) for a, c in arch_configs().items()} == {'mha': 512, 'gqa': 128, 'mqa': 64, 'mla': 144}

@pytest.mark.parametrize('attn', ATTN_TYPES)
@pytest.mark.parametrize('seed', [0, 1])
def test_cached_generation_matches_forward(attn, seed):
    torch.manual_seed(seed)
    cfg = arch_configs(**TINY)[attn]
    model, prompt = Decoder(cfg).eval(), torch.randint(0, 64, (3, 7))
    for absorb in ([False, True] if attn == 'mla' else [False]):
        cache = KVCache(cfg.n_layers)
        ids, logits = generate(model, prompt, 9, cache, absorb)
        torch.testing.assert_close(logits, model(ids[:, :-1]), atol=1e-4, rtol=1e-4)
        assert cache.values_per_token() == cfg.n_layers * kv_values_per_token(cfg)
