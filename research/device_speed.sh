#!/usr/bin/env bash
# kvstrat-bench's speed protocol on a GPU, on a random model of Llama-3.2-1B's shape: no weights, no text, no network.
#
#   OUT=/some/dir bash research/device_speed.sh         # results in $OUT/gpu-speed (results.jsonl, results.md, log.txt)
#
# For a machine with python3, a CUDA torch and transformers' own dependencies, but not kvstrat's other ones: the
# wheels in .whl/ (transformers 5.24, fastcore, flash-linear-attention, fla-core, einops) are installed into $SITE
# with no network. Bounded for a borrowed GPU: the bench starts no measurement after $TIME_LIMIT seconds (counted from
# loading the model), a strategy that fails is logged (errors.log) and skipped, and the whole run is interrupted
# after $HARD_LIMIT seconds; every finished row is already on disk, and the report is written in any case.
# Every setting below can be overridden from the environment (a CPU rehearsal: MODEL=shape:smollm2-135m DEVICE=cpu
# LENGTHS="256 512" REPEATS=1 EXTRA="--threads 1" PY="python -s -S" PYTHONPATH=<a site without kvstrat's deps>).
case ${1:-} in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit;; esac # the comment above
set -uo pipefail
OUT=${OUT:?set OUT to the folder for the results}
SITE=${SITE:-/tmp/site}
PY=${PY:-python3}
MODEL=${MODEL:-shape:llama-3.2-1b}
DEVICE=${DEVICE:-cuda}
LENGTHS=${LENGTHS:-4k 16k 32k}
REPEATS=${REPEATS:-2}
# The strategies session 2's run (nbs/results/bench/gpu) lacks come first, so that the time limit cuts the ones it has;
# this shape has no shipped head pattern, so streaming heads use the data-free index pattern and a zero-shot state.
STRATEGIES=${STRATEGIES:-full snapkv keynorm stratigraphic adaptive streaming:pattern=index,calibration=none hybrid:pattern=index,calibration=none kivi int8 int4 kivi:bits=2 streamingllm h2o}
TIME_LIMIT=${TIME_LIMIT:-240}
HARD_LIMIT=${HARD_LIMIT:-330}
EXTRA=${EXTRA:-}
cd "$(dirname "$0")/.."
RUN="$OUT/gpu-speed"
mkdir -p "$RUN"

# Pure-Python wheels: pip without an index, or, where pip is missing, unzipped as they are.
PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl ||
  for w in .whl/*.whl; do python3 -m zipfile -e "$w" "$SITE"; done
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export TQDM_DISABLE=1 # no progress bars in the log; each finished row is still one line

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  $PY -c 'import sys, torch, transformers, fastcore, kvstrat
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())
print("transformers", transformers.__version__, transformers.__file__)
print("fastcore", fastcore.__version__, "kvstrat", kvstrat.__version__, kvstrat.__file__)' 2>&1; } | tee "$RUN/versions.txt"

timeout -s INT -k 20 "$HARD_LIMIT" $PY -m kvstrat.cli --model "$MODEL" --text random --protocol speed --device "$DEVICE" \
  --speed-lengths $LENGTHS --speed-repeats "$REPEATS" --time-limit "$TIME_LIMIT" --keep-going --out "$RUN" \
  --strategies $STRATEGIES $EXTRA 2>&1 | tee "$RUN/log.txt"
rc=${PIPESTATUS[0]}
# The bench writes the report when it ends normally; after an interruption or failures, write it from the rows on disk.
[ "$rc" = 0 ] || $PY -m kvstrat.cli report "$RUN" > /dev/null 2>&1 || true
echo "device_speed.sh: kvstrat-bench exit code $rc (124/130: interrupted at ${HARD_LIMIT}s; 1: some strategies failed)" | tee -a "$RUN/log.txt"
exit "$rc"
