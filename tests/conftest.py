"""Set before any test imports triton: without CUDA, Triton kernels run under its CPU interpreter (it reads this
variable once, when a kernel is defined).

Hypothesis draws the same examples on every run (`derandomize`), so a red CI is a change's doing, never a new draw;
`HYPOTHESIS_PROFILE=explore pytest` draws fresh random examples, to search for new failures."""
import os
import torch
from hypothesis import settings

if not torch.cuda.is_available(): os.environ.setdefault('TRITON_INTERPRET', '1')

settings.register_profile('ci', derandomize=True, print_blob=True)
settings.register_profile('explore', derandomize=False, print_blob=True)
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE', 'ci'))
