"""The C heap through one prefill: glibc's `mallinfo2` after each decoder layer, in fresh processes.

Each process loads the bench model and nothing else, attaches the strategy's cache, prefills the first LENGTH tokens
of WikiText-2 (as the bench takes them) in one chunk, and prints, after each layer and after the prefill,
`arena/in use/free` in MB (the heap's size, the bytes malloc has handed out, the freed bytes it keeps), then the
process's peak resident set (the bench's `peak_memory_mb`). A heap that grows while the bytes in use do not is
fragmenting: freed blocks that new requests do not fit. Environment variables such as `MALLOC_MMAP_THRESHOLD_` reach
the fresh processes (research diary, 2026-12-04):
    python research/heap_by_layer.py 5 1024 full hybrid stratigraphic      # ROUNDS LENGTH STRATEGY...
"""
import ctypes, multiprocessing, sys
from concurrent.futures import ProcessPoolExecutor
import torch
from kvstrat.bench import load_bench_model, peak_memory_mb, reset_peak_memory
from kvstrat.cache import CompressedCache
from kvstrat.core import load_model, load_text, tokenize

class MallInfo2(ctypes.Structure): # glibc's struct mallinfo2, in its order
    _fields_ = [(n, ctypes.c_size_t) for n in
                'arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost'.split()]

def heap_mb() -> str: # the heap's size / in use / free, MB
    libc = ctypes.CDLL('libc.so.6'); libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    return f'{m.arena >> 20}/{m.uordblks >> 20}/{m.fordblks >> 20}'

@torch.inference_mode()
def one_process(strategy:str, ids:torch.Tensor) -> str: # (L,) token ids
    torch.set_num_threads(2)
    model, _ = load_bench_model('smollm2-135m', None)
    reset_peak_memory(torch.device('cpu'))
    seen, cache = [], CompressedCache(model, strategy)
    hooks = [l.register_forward_hook(lambda *_: seen.append(heap_mb())) for l in model.get_decoder().layers]
    try:
        with cache.attached(model): model(ids[None], cache=cache, use_cache=True, logits_to_keep=1)
    finally:
        for h in hooks: h.remove()
    return f"{' '.join(seen)} | prefill {heap_mb()} | peak {peak_memory_mb(torch.device('cpu')):.0f} MB"

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 4 or not (sys.argv[1].isdigit() and sys.argv[2].isdigit()):
        sys.exit(__doc__)
    rounds, length, strategies = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    _, tok = load_model('smollm2-135m')
    ids = tokenize(tok, load_text('auto')[0])[:length]
    for i in range(rounds): # the strategies take turns, each in a fresh process
        for s in strategies:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context('spawn')) as pool:
                print(i, s, pool.submit(one_process, s, ids).result(), flush=True)
