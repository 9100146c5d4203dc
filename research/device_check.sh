#!/usr/bin/env bash
# The GPU checks of one lent session, as one bounded script: the CUDA tests (the Triton read compiled against the
# reference read, the fla kernel against the torch path,
# the streaming cache on CUDA against the teacher-forced model, every strategy on CUDA), then the speed protocol on a
# random model of Llama-3.2-1B's shape (research/device_speed.sh). Results under $OUT.
#
#   OUT=/some/dir bash research/device_check.sh
#   OUT=/some/dir RESUME=nbs/results/bench/gpu TESTS="tests/test_streaming.py" bash research/device_check.sh
#
# RESUME: a results folder of an earlier run whose results.jsonl the speed run continues (finished rows are skipped).
case ${1:-} in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit;; esac # the comment above
set -uo pipefail
OUT=${OUT:?set OUT to the folder for the results}
SITE=${SITE:-/tmp/site}
TESTS=${TESTS:-tests/test_triton.py tests/test_streaming.py tests/test_cuda.py}
cd "$(dirname "$0")/.."
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
export PYTHONPATH="$SITE:$PWD"
timeout -k 10 "${TEST_LIMIT:-150}" python3 -m pytest -q -rfE --tb=short -p no:cacheprovider $TESTS > "$OUT/pytest.txt" 2>&1
echo "pytest exit code $? (124: stopped at ${TEST_LIMIT:-150}s)" >> "$OUT/pytest.txt"
if [ -n "${RESUME:-}" ] && [ -f "$RESUME/results.jsonl" ]; then mkdir -p "$OUT/gpu-speed"; cp "$RESUME/results.jsonl" "$OUT/gpu-speed/"; fi
STRATEGIES=${STRATEGIES:-"full int8 int4 kivi kivi:bits=2 streamingllm h2o stratigraphic streaming:pattern=index,calibration=none hybrid:pattern=index,calibration=none snapkv adaptive"} \
  TIME_LIMIT=${TIME_LIMIT:-220} HARD_LIMIT=${HARD_LIMIT:-290} OUT="$OUT" bash research/device_speed.sh
