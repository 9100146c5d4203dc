"""250 runs of each of `research/fuzz.py`'s searches, at a fixed seed: random batches, chunks, padding (a padded row
against the same prompt alone), crops, reorders and parameters on tiny models. Each kind must run most of its draws,
and none may fail."""
import sys
from pathlib import Path
import pytest
sys.path.insert(0, str(Path(__file__).parents[1]/'research'))
from fuzz import LAYOUTS, search

@pytest.mark.parametrize('kind', LAYOUTS)
def test_fuzz(kind):
    ran, refused, failures = search(kind, seed=0, runs=250)
    assert not failures, failures
    assert ran >= 12, (ran, refused) # drawn parameters are often refused; the draws must still run
