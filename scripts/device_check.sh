#!/usr/bin/env bash
# The GPU checks of one lent session, as one bounded script: the CUDA tests (every strategy on CUDA; the fla kernel
# against the torch path; the streaming cache on CUDA against the teacher-forced model), then the speed protocol on
# a random model of Llama-3.2-1B's shape (scripts/device_speed.sh). Results under $OUT.
#
#   OUT=/some/dir bash scripts/device_check.sh
set -uo pipefail
OUT=${OUT:?set OUT to the folder for the results}
SITE=${SITE:-/tmp/site}
cd "$(dirname "$0")/.."
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
export PYTHONPATH="$SITE:$PWD"
timeout -k 10 ${TEST_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider tests/test_streaming.py tests/test_cuda.py 2>&1 | tail -40 | tee "$OUT/pytest.txt"
STRATEGIES=${STRATEGIES:-"full int8 int4 kivi kivi:bits=2 streamingllm h2o stratigraphic streaming:pattern=index,calibration=none hybrid:pattern=index,calibration=none snapkv adaptive"} \
  TIME_LIMIT=${TIME_LIMIT:-220} HARD_LIMIT=${HARD_LIMIT:-290} OUT="$OUT" bash scripts/device_speed.sh
