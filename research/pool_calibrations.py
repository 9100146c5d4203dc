"""Pool calibrations measured on different texts into the one a single run over all their windows measures.

Each input is FILE=WINDOWS, WINDOWS the calibration windows its run averaged over (`kvstrat-calibrate` reads
`--windows` per text, 2 by default, for each of its `--texts`):
    python research/pool_calibrations.py OUT.json kvstrat/data/sensitivity-smollm2-135m-rotated.json=4 code.json=2
"""
import sys
from kvstrat.sensitivity import load_sensitivity, pool_sensitivities

if __name__ == '__main__':
    if {'-h', '--help'} & set(sys.argv[1:]): print(__doc__); sys.exit()
    if len(sys.argv) < 3 or not all(i.rpartition('=')[2].isdigit() for i in sys.argv[2:]): sys.exit(__doc__)
    out, *inputs = sys.argv[1:]
    parts = [(load_sensitivity(path), int(n)) for path, _, n in (i.rpartition('=') for i in inputs)]
    pool_sensitivities(parts).save(out)
    print(f'{out}: pooled {len(parts)} calibrations over {sum(n for _, n in parts)} windows')
