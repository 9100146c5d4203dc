"""Set before any test imports triton: without CUDA, Triton kernels run under its CPU interpreter (it reads this
variable once, when a kernel is defined).

Hypothesis draws the same examples on every run (`derandomize`), so a red CI is a change's doing, never a new draw;
`HYPOTHESIS_PROFILE=explore pytest` draws fresh random examples, to search for new failures, and `HYPOTHESIS_SCALE=N`
draws N times as many in each property test (`examples`). The draws are seeded from each test's source, so an edit to
a test draws anew: a search at scale finds before CI does what a new draw would."""
import os
import torch
from hypothesis import settings

if not torch.cuda.is_available(): os.environ.setdefault('TRITON_INTERPRET', '1')

settings.register_profile('ci', derandomize=True, print_blob=True)
settings.register_profile('explore', derandomize=False, print_blob=True)
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE', 'ci'))

def examples(n:int) -> int: return n * int(os.environ.get('HYPOTHESIS_SCALE', '1')) # a property test's draws
