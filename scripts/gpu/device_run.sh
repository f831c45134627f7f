#!/usr/bin/env bash
# The proof of GPU support on the lent GPU machine (one H100, 16 cores, Python 3.12 with CuPy,
# no registry): install what docs/gpus.md ("Installing") lists, from the carried
# .device/ folder, then run one phase, writing a summary and every log under $OUT.
#
# Here, once:   make device-wheels        (.device/: mpich and pytest-mpi wheels, a trimmed
#                                         Intel MPI 2021.14.2; about 40 MB, git-ignored)
# Device tool, two calls (each well inside its 10 minutes; a fresh machine reinstalls in ~30 s):
#   run(command="bash scripts/gpu/device_run.sh correctness", carry=[".device"], timeout_s=600)
#   run(command="bash scripts/gpu/device_run.sh bench", carry=[".device"], timeout_s=600)
# Here, a rehearsal of every step on the CPU (the fake CuPy; this machine's .venv plays the
# image's Python; CUDA-awareness is stood in for by MWMS_MPI_CUDA_AWARE=1 under Intel MPI):
#   bash scripts/gpu/device_run.sh dry-run
#
# Phases:
#   correctness  `make test-gpu` under the mpich wheel (CuPy arrays staged; one rank: NCCL) and
#                under Intel MPI with I_MPI_OFFLOAD=1 (cuda_mpi), at 1, 2 and 4 ranks, each with
#                the training tests (train_digits.py --device gpu); `mwms-mpi info` under both.
#   bench        scripts/bench_gpu.py at 2 ranks under both MPIs and at 1 rank (NCCL), then the
#                CPU suites (tests/mpi) at 8 and 16 ranks (GPU hidden) and at 2 (GPU visible).
# Every step is bounded (`timeout`) so that a slow one cannot take the call's whole time; the
# summary lists each step's exit code and pytest's closing line.
set -uo pipefail

phase=${1:?usage: device_run.sh correctness|bench|all|dry-run}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/build/device-out}
mkdir -p "$OUT"
dry=0
if [[ $phase == dry-run ]]; then
  dry=1
fi
name=$phase
log=$OUT/$name.log
summary=$OUT/summary-$name.txt
: >"$log"
: >"$summary"
start=$(date +%s)

note() { echo "$*" | tee -a "$summary" "$log"; }

# step NAME SECONDS COMMAND...: runs it bounded, its output into the log, a line in the summary.
step() {
  local label=$1 limit=$2
  shift 2
  echo "===== $label (limit ${limit}s): $*" >>"$log"
  local t0=$(date +%s) rc
  # bash -c: the command may be one of the functions below (exported to it).
  timeout --signal=TERM --kill-after=15 "$limit" bash -c '"$@"' "$label" "$@" \
    >"$OUT/.step.log" 2>&1
  rc=$?
  cat "$OUT/.step.log" >>"$log"
  local closing
  closing=$(grep -E "^[0-9]+ (passed|failed|skipped)|[0-9]+ passed|[0-9]+ failed|error" \
    "$OUT/.step.log" | grep -vE "^E |Error:|^\s" | tail -n 8 | tr '\n' ';')
  note "$label: rc=$rc ($(($(date +%s) - t0)) s; ${closing:-no pytest summary})"
  rm -f "$OUT/.step.log"
  return 0
}

# -- the environment -----------------------------------------------------------------------
if ((dry)); then
  PYTHON=${PYTHON:-$root/.venv/bin/python}  # plays the image's python3 (numpy, mpi4py, pytest)
  V=${V:-/tmp/mwms-device-dry}
  GPU_SIZES="1 2"
  CPU_SIZES="2"
  BENCH_ARGS="--quick --max-bytes 1048576"
  export MWMS_TEST_FAKE_CUPY=1
  run_py=("$V/bin/python" "$root/tests/support/fake_cupy_run.py")  # the fake CuPy first
  offload=0
  aware=1
  expect_mpich="1=nccl,staging"  # the fake has an NCCL double: at one rank AUTO takes it
  expect_impi="1=nccl,cuda_mpi"
else
  PYTHON=${PYTHON:-python3}
  V=${V:-/tmp/mwms-device}
  GPU_SIZES="1 2 4"
  CPU_SIZES="8 16"
  BENCH_ARGS=""
  run_py=("$V/bin/python" -m mwms_mpi.run)
  offload=1
  aware=""
  expect_mpich="1=nccl,staging"  # one rank on its GPU: AUTO takes NCCL; ranks sharing it stage
  expect_impi="1=nccl,cuda_mpi"
fi
I=$root/.device/impi
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CUPY_CACHE_DIR=/tmp/mwms-cupy-kernels  # kernels compiled once per machine, not per rank
export MWMS_TEST_MAX_EXAMPLES=${MWMS_TEST_MAX_EXAMPLES:-15}
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}

# mpich CMD... / impi CMD...: CMD (a program or a function) with that MPI's environment.
mpich() (
  export LD_LIBRARY_PATH="$V/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MPI4PY_MPIABI=mpich
  export MWMS_TEST_EXPECT_TRANSPORT="$expect_mpich"
  "$@"
)
impi() (
  export I_MPI_ROOT="$I" PATH="$I/bin:$PATH" LD_LIBRARY_PATH="$I/lib:$I/lib/libfabric"
  export FI_PROVIDER_PATH="$I/lib/libfabric/prov" MPI4PY_MPIABI=mpich I_MPI_OFFLOAD=$offload
  export MWMS_TEST_EXPECT_TRANSPORT="$expect_impi"
  if [[ -n $aware ]]; then
    export MWMS_MPI_CUDA_AWARE=$aware
  fi
  "$@"
)

# hidden CMD...: CMD with no GPU visible (the CPU suites at many ranks: one CUDA context each
# would be wasted on them).
hidden() (
  export CUDA_VISIBLE_DEVICES=
  unset MWMS_TEST_FAKE_CUPY
  "$@"
)

# make TARGET ARGS (the Makefile's own targets), or the same commands where make is missing.
suite() {
  local target=$1 mpiexec=$2 sizes=$3
  shift 3
  if command -v make >/dev/null; then
    make --no-print-directory "$target" VENV="$V" MPIEXEC="$mpiexec" "$@"
    return
  fi
  local launch=("$V/bin/python" -m mwms_mpi.cluster.mpiexec --mpiexec "$mpiexec" --timeout 600)
  local pytest=("$V/bin/python" -m pytest -q -rs)
  local n rc=0
  for n in $sizes; do
    echo "== mpiexec -n $n ($target without make)"
    if [[ $target == test-gpu ]]; then
      MWMS_TEST_WORLD_SIZE=$n "${launch[@]}" -n "$n" "${pytest[@]}" --with-mpi --mwms-mpi \
        -m mpi tests/gpu || rc=1
    else
      MWMS_TEST_WORLD_SIZE=$n "${launch[@]}" -n "$n" "${pytest[@]}" --with-mpi --mwms-mpi \
        tests/mpi || rc=1
    fi
  done
  if [[ $target == test-gpu ]]; then
    "${pytest[@]}" -m "not mpi" tests/gpu || rc=1
  fi
  return $rc
}

export V I offload aware expect_mpich expect_impi
export -f mpich impi hidden suite

install() {
  note "phase $name on $(hostname): $(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi')"
  "$PYTHON" -m venv "$V" || return 1
  local base site
  base=$("$PYTHON" -c "import site; print(site.getsitepackages()[0])")
  site=$("$V/bin/python" -c "import site; print(site.getsitepackages()[0])")
  echo "$base" >"$site/image.pth"  # the image's packages (CuPy, numpy, mpi4py, pytest) stay visible
  "$V/bin/python" -m pip install -q --no-index --no-deps --no-compile --ignore-installed \
    "$root"/.device/wheels/*.whl ||
    return 1
  "$V/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e "$root" ||
    echo "editable install failed: PYTHONPATH=$root is used instead"
  "$V/bin/python" - <<'PY'
import importlib
for name in ("numpy", "mpi4py", "cupy", "pytest", "hypothesis", "pytest_mpi", "sklearn"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
PY
}

correctness() {
  step "mwms-mpi info, mpich wheel, 2 ranks" 90 \
    mpich "$V/bin/mpiexec" -n 2 "$V/bin/python" -m mwms_mpi info
  step "mwms-mpi info, Intel MPI offload=$offload, 2 ranks" 90 \
    impi "$I/bin/mpiexec.hydra" -n 2 "$V/bin/python" -m mwms_mpi info
  step "make test-gpu, mpich wheel (sizes $GPU_SIZES; expect $expect_mpich)" 270 \
    mpich suite test-gpu "$V/bin/mpiexec" "$GPU_SIZES" GPU_SIZES="$GPU_SIZES" MPI=mpich
  step "make test-gpu, Intel MPI offload=$offload (sizes $GPU_SIZES; expect $expect_impi)" 270 \
    impi suite test-gpu "$I/bin/mpiexec.hydra" "$GPU_SIZES" GPU_SIZES="$GPU_SIZES" MPI=impi
}

bench() {
  step "bench_gpu, mpich wheel, 2 ranks" 150 \
    mpich "$V/bin/mpiexec" -n 2 "${run_py[@]}" scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-mpich-2.json"
  step "bench_gpu, Intel MPI offload=$offload, 2 ranks" 150 \
    impi "$I/bin/mpiexec.hydra" -n 2 "${run_py[@]}" scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-impi-2.json"
  step "bench_gpu, 1 rank (NCCL)" 90 \
    mpich "$V/bin/mpiexec" -n 1 "${run_py[@]}" scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-nccl-1.json"
  step "make test-mpi (CPU suites), GPU hidden, sizes $CPU_SIZES" 240 \
    hidden mpich suite test-mpi "$V/bin/mpiexec" "$CPU_SIZES" MPI_SIZES="$CPU_SIZES" MPI=mpich
  step "make test-mpi (CPU suites), GPU visible, 2 ranks" 90 \
    mpich suite test-mpi "$V/bin/mpiexec" 2 MPI_SIZES=2 MPI=mpich
}

if ! install >>"$log" 2>&1; then
  note "install failed: see $name.log"
  exit 1
fi
note "installed in $(($(date +%s) - start)) s"
case $phase in
  correctness) correctness ;;
  bench) bench ;;
  all | dry-run) correctness && bench ;;
  *)
    note "unknown phase $phase"
    exit 2
    ;;
esac
if [[ $phase != correctness ]]; then
  # The benchmark tables, from the logs, in one file.
  grep -hE "^ +[0-9]+  |ranks, .*median|beat staging|overhead at 1 MB" "$log" >"$OUT/bench-tables-$name.txt"
fi
note "done in $(($(date +%s) - start)) s"
