"""Set before any test imports triton: without CUDA, Triton kernels run under its CPU interpreter (it reads this
variable once, when a kernel is defined)."""
import os
import torch

if not torch.cuda.is_available(): os.environ.setdefault('TRITON_INTERPRET', '1')
