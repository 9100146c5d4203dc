"""What reading each chunk's own tokens at 8 bits costs, under protocol P: a diagnosis of `stratigraphic:top_bits=8`.

    python research/own_chunk_cost.py TEXT OUT_DIR       # kvstrat-bench rows, ~1 minute each on 2 cores

The `int8` strategy stores every token at 8 bits, but only after the chunk it arrived in has attended: each chunk
reads its own tokens, and a decoded token itself, at fp16. `int8-own-chunk` is the same cache with tier 0 in the
same 8-bit format, so that each chunk also reads its own tokens at 8 bits, as every head does with
`stratigraphic:top_bits=8`; with `rotate=true`, in tier 0's rotated format. The difference between the rows, paired
with FullKV on the same windows, is what that read costs. Nothing is chosen from these rows.
"""
import sys
from dataclasses import dataclass, replace
from typing import ClassVar
from kvstrat.baselines import Int8
from kvstrat.policy import register
from kvstrat import cli

@register
@dataclass
class Int8OwnChunk(Int8):
    "`int8` with tier 0 at 8 bits too: each chunk reads its own tokens at 8 bits. A diagnosis, not a compressor."
    name: ClassVar[str] = 'int8-own-chunk'
    rotate: bool = False # tier 0 Hadamard-rotated, as `stratigraphic:top_bits=8` stores it

    def tiers(self, head_dim:int):
        _, int8 = super().tiers(head_dim) # fp16, then every token at 8 bits
        return (replace(int8, rotate=self.rotate), int8) # tier 0 in int8's own format

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) != 3: sys.exit(__doc__)
    sys.exit(cli.main(['--protocol', 'ppl', '--windows', '8', '--text', sys.argv[1], '--threads', '2',
                       '--out', sys.argv[2], '--strategies', 'full', 'int8', 'int8-own-chunk',
                       'int8-own-chunk:rotate=true']))
