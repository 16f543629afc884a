#!/usr/bin/env bash
# perflab's GPU checks in one bounded call, run from the project's root on a CUDA machine:
#
#   bash benchmarks/gpu_session.sh [PART ...]      # default: suite truth main hf
#
# where .whl/ (built on the CPU machine by the shared wheels.sh) holds perflab and the
# pure-Python packages the GPU machine lacks; without .whl/ the installed perflab is used.
# Each part has its own time limit, so that the default parts fit a 560 s call with room
# for the install (on an H100, 2026-11-26: suite 153 s, truth 58 s, main 110 s; hf not
# run on a GPU yet):
#
#   suite    the cuda test tier, pytest -m cuda (tests/test_cuda.py, tests/test_spin.py)
#   truth    benchmarks/gpu_truth.py --skip-tests: the spin ground truth through a sweep
#            (the suite part runs the tests it would otherwise repeat)
#   main     the README's main command on the GPU
#   hf       a real architecture: +experiment=hf_attention amp=bf16 (a GPT-2 built from its
#            config, eager against sdpa attention; needs transformers on the GPU machine)
#   speed    benchmarks/gpu_speed.py: per-trial cost, the sub-millisecond spin, compile study
#   kernels  benchmarks/kernels.py: perflab's Triton kernels against eager and compile
#   warmup   benchmarks/warmup_floor.py --run cuda: what a shorter warm-up floor risks
#
# Everything lands in $OUT (default /tmp/gpu-out): summary.txt, one line per part (exit
# code, seconds, the log's last line), and logs.tgz, every log and sweep directory.
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/gpu-out}
WORK=/tmp/gpu-work
SUMMARY="$OUT/summary.txt"
ROOT=$PWD
mkdir -p "$OUT" "$WORK"
: > "$SUMMARY"
# the traces are what a failure is read from, but Python pickles (compile caches) are not
trap 'tar czf "$OUT/logs.tgz" --exclude="*.pickle" -C /tmp gpu-work 2>/dev/null' EXIT

if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || { echo "wheel install failed" | tee -a "$SUMMARY"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda,
"triton", triton.__version__, "gpu", torch.cuda.is_available())'
} 2>&1 | tee -a "$SUMMARY"

part() {  # part NAME SECONDS COMMAND...: run in $WORK, log to NAME.log, one summary line
  local name=$1 limit=$2 started rc
  shift 2
  started=$(date +%s)
  (cd "$WORK" && timeout "$limit" "$@") > "$WORK/$name.log" 2>&1
  rc=$?
  echo "$name: rc $rc in $(($(date +%s) - started)) s: $(grep -v '^round ' "$WORK/$name.log" |
    tail -1 | cut -c1-300)" | tee -a "$SUMMARY"
}

for name in ${@:-suite truth main hf}; do
  case $name in
    suite) part suite 180 python3 -m pytest -q -m cuda -p no:cacheprovider \
      --rootdir "$ROOT" "$ROOT/tests" ;;
    truth) part truth 100 python3 "$ROOT/benchmarks/gpu_truth.py" --skip-tests \
      --workdir "$WORK/truth" ;;
    main) part main 150 perflab -m batch_size=32,64 amp=true,false hydra.sweep.dir="$WORK/main" ;;
    hf) part hf 100 perflab -m +experiment=hf_attention amp=bf16 hydra.sweep.dir="$WORK/hf" ;;
    speed) part speed 300 python3 "$ROOT/benchmarks/gpu_speed.py" --workdir "$WORK/speed" ;;
    kernels) part kernels 100 python3 "$ROOT/benchmarks/kernels.py" ;;
    warmup) part warmup 300 python3 "$ROOT/benchmarks/warmup_floor.py" --run cuda \
      --workdir "$WORK/warmup" ;;
    *) echo "$name: unknown part (suite, truth, main, hf, speed, kernels, warmup)" | tee -a "$SUMMARY" ;;
  esac
done
