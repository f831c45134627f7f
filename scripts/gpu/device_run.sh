#!/usr/bin/env bash
# The proof of GPU support on the lent GPU machine (one H100, 16 cores, Python 3.12 with CuPy,
# no registry): install what docs/gpus.md ("Installing") lists, from the carried
# .device/ folder, then run one phase, writing a summary and every log under $OUT.
#
# Here, once:   make device-wheels        (.device/: mpich and pytest-mpi wheels, a trimmed
#                                         Intel MPI 2021.14.2; about 40 MB, git-ignored)
# Device tool, one call a phase (a fresh machine reinstalls in ~30 s), e.g.
#   run(command="bash scripts/gpu/device_run.sh mpich", carry=[".device"], timeout_s=600)
# and likewise impi, bench, cpu; or, with only ~15 minutes of device time, one call:
#   run(command="DEADLINE_S=480 bash scripts/gpu/device_run.sh session", carry=[".device"],
#       timeout_s=560)
# Here, a rehearsal of every step on the CPU (the fake CuPy; this machine's .venv plays the
# image's Python; CUDA-awareness is stood in for by MWMS_MPI_CUDA_AWARE=1 under Intel MPI):
#   bash scripts/gpu/device_run.sh dry-run
#
# Phases, each one device call that stays under ~540 s (the tool allows 600 s a command, and the
# machine starts fresh each time: empty CuPy kernel cache), each writing its log, a text summary
# and summary-PHASE.json (every step: label, exit code, seconds, pytest's closing lines) to $OUT:
#   mpich        `make test-gpu` under the mpich wheel (CuPy arrays staged; one rank: NCCL) at
#                1, 2 and 4 ranks, every size reported, with the training tests
#                (train_digits.py --device gpu); `mwms-mpi info`.
#   impi         probe_cuda_mpi.py first (in-place Allreduce, every dtype, MAX/MIN, Iallreduce,
#                gathers, broadcasts on device pointers, a crash costing one case), then
#                `make test-gpu` under Intel MPI with I_MPI_OFFLOAD=1 (cuda_mpi) at 1, 2, 4 ranks,
#                without the training tests (they ran under mpich); `mwms-mpi info`.
#   bench        scripts/bench_gpu.py at 2 ranks under both MPIs and at 1 rank (NCCL);
#                BENCH_MPIS (default "mpich impi nccl") picks some, BENCH_ARGS passes options
#                (e.g. "--min-bytes 16777216 --max-bytes 67108864").
#   cpu          the CPU suites (tests/mpi, tf_parity) at 8 and 16 ranks (GPU hidden), each size
#                run and reported, and at 2 ranks with the GPU visible.
#   session      for a session with one call's worth of device time: mpich and impi on cores 0-3
#                beside cpu's 8- and 16-rank suites on the other cores, then bench alone.
# DEADLINE_S (any phase; unset: none) bounds the phase from its start: a step that would pass
# the deadline is cut to fit, one that cannot start is reported skipped.
#   dry-run      every phase on this machine over the fake CuPy (the rehearsal).
set -uo pipefail

phase=${1:?usage: device_run.sh mpich|impi|bench|cpu|session|all|dry-run}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/build/device-out}
mkdir -p "$OUT"
dry=${DRY:-0}  # DRY=1: any phase rehearsed here, as dry-run rehearses them all
if [[ $phase == dry-run ]]; then
  dry=1
fi
name=$phase
log=$OUT/$name.log
summary=$OUT/summary-$name.txt
steps_json=$OUT/.steps-$name.jsonl
: >"$log"
: >"$summary"
: >"$steps_json"
start=$(date +%s)
deadline=$((start + ${DEADLINE_S:-100000}))

note() { echo "$*" | tee -a "$summary" "$log"; }

# step NAME SECONDS COMMAND...: runs it bounded (by SECONDS and by the phase's deadline), its
# output into the log, a line in the summary and one in the JSON summary. Two steps may run at
# once (the session phase): each has its own temporary log, appended whole when it ends.
step() {
  local label=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s) - 5))
  if ((left < 15)); then
    note "$label: skipped (the phase's deadline is $((left + 5)) s away)"
    record "$label" "" 0 ""
    return 0
  fi
  ((limit > left)) && limit=$left
  local t0=$(date +%s) rc own
  own=$(mktemp "$OUT/.step.XXXXXX")
  echo "===== $label (limit ${limit}s): $*" >"$own"
  # bash -c: the command may be one of the functions below (exported to it).
  timeout --signal=TERM --kill-after=15 "$limit" bash -c '"$@"' "$label" "$@" >>"$own" 2>&1
  rc=$?
  cat "$own" >>"$log"
  local closing seconds=$(($(date +%s) - t0))
  closing=$(grep -E "^[0-9]+ (passed|failed|skipped)|[0-9]+ passed|[0-9]+ failed|error|^== " \
    "$own" | grep -vE "^E |Error:|^\s" | tail -n 12 | tr '\n' ';')
  note "$label: rc=$rc ($seconds s; ${closing:-no pytest summary})"
  record "$label" "$rc" "$seconds" "$closing"
  rm -f "$own"
  return 0
}

# record LABEL RC SECONDS CLOSING: the step's line of the JSON summary (RC empty: skipped).
record() {
  LABEL=$1 RC=$2 SECONDS_TAKEN=$3 CLOSING=$4 "$PYTHON" -c '
import json, os
rc = os.environ["RC"]
print(json.dumps({"label": os.environ["LABEL"], "rc": int(rc) if rc else None,
                  "seconds": int(os.environ["SECONDS_TAKEN"]), "skipped": not rc,
                  "closing": [c for c in os.environ["CLOSING"].split(";") if c]}))' >>"$steps_json"
}

# -- the environment -----------------------------------------------------------------------
if ((dry)); then
  PYTHON=${PYTHON:-$root/.venv/bin/python}  # plays the image's python3 (numpy, mpi4py, pytest)
  V=${V:-/tmp/mwms-device-dry}
  GPU_SIZES=${GPU_SIZES:-"1 2"}
  CPU_SIZES=${CPU_SIZES:-"2"}
  BENCH_ARGS=${BENCH_ARGS:-"--quick --max-bytes 1048576"}
  export MWMS_TEST_FAKE_CUPY=1
  RUN_PY="$V/bin/python $root/tests/support/fake_cupy_run.py"  # the fake CuPy first
  offload=0
  aware=1
  expect_mpich="1=nccl,staging"  # the fake has an NCCL double: at one rank AUTO takes it
  expect_impi="1=nccl,cuda_mpi"
else
  PYTHON=${PYTHON:-python3}
  V=${V:-/tmp/mwms-device}
  GPU_SIZES=${GPU_SIZES:-"1 2 4"}
  CPU_SIZES=${CPU_SIZES:-"8 16"}
  BENCH_ARGS=${BENCH_ARGS:-}
  RUN_PY="$V/bin/python -m mwms_mpi.run"
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
  if [[ $target == test-gpu && ${GPU_TRAINING:-1} != 0 ]]; then
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

# probe: probe_cuda_mpi.py under Intel MPI at 2 ranks, rerun after a crash (the crashed case
# is skipped on the rerun and reported "crashed"), then summarised in probe-cuda-mpi.json.
probe() {
  local results=$OUT/probe-cuda-mpi.jsonl attempt
  : >"$results"
  for attempt in $(seq 1 40); do  # a crash costs one case and ~2 s; the step's limit bounds it
    echo "== probe attempt $attempt"
    # shellcheck disable=SC2086  # RUN_PY is a command line
    if timeout --kill-after=5 60 "$I/bin/mpiexec.hydra" -n 2 $RUN_PY \
      scripts/gpu/probe_cuda_mpi.py "$results"; then
      break
    fi
  done
  "$PYTHON" scripts/gpu/probe_summary.py "$results" "$OUT/probe-cuda-mpi.json"
}

phase_mpich() {
  step "mwms-mpi info, mpich wheel, 2 ranks" 60 \
    mpich "$V/bin/mpiexec" -n 2 "$V/bin/python" -m mwms_mpi info
  step "make test-gpu, mpich wheel (sizes $GPU_SIZES; expect $expect_mpich; training)" 330 \
    mpich suite test-gpu "$V/bin/mpiexec" "$GPU_SIZES" GPU_SIZES="$GPU_SIZES" MPI=mpich
}

phase_impi() {
  step "mwms-mpi info, Intel MPI offload=$offload, 2 ranks" 60 \
    impi "$I/bin/mpiexec.hydra" -n 2 "$V/bin/python" -m mwms_mpi info
  step "probe_cuda_mpi, Intel MPI offload=$offload, 2 ranks" 150 impi probe
  step "make test-gpu, Intel MPI offload=$offload (sizes $GPU_SIZES; expect $expect_impi)" 300 \
    impi suite test-gpu "$I/bin/mpiexec.hydra" "$GPU_SIZES" GPU_SIZES="$GPU_SIZES" MPI=impi \
    GPU_TRAINING=0
}

phase_bench() {
  local mpis=${BENCH_MPIS:-"mpich impi nccl"}  # a subset reruns one (e.g. BENCH_MPIS=impi)
  # shellcheck disable=SC2086  # RUN_PY is a command line, BENCH_ARGS words
  [[ $mpis == *mpich* ]] && step "bench_gpu, mpich wheel, 2 ranks" 150 \
    mpich "$V/bin/mpiexec" -n 2 $RUN_PY scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-mpich-2.json"
  # shellcheck disable=SC2086
  [[ $mpis == *impi* ]] && step "bench_gpu, Intel MPI offload=$offload, 2 ranks" 150 \
    impi "$I/bin/mpiexec.hydra" -n 2 $RUN_PY scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-impi-2.json"
  # shellcheck disable=SC2086
  [[ $mpis == *nccl* ]] && step "bench_gpu, 1 rank (NCCL)" 90 \
    mpich "$V/bin/mpiexec" -n 1 $RUN_PY scripts/bench_gpu.py $BENCH_ARGS \
    --json "$OUT/bench-nccl-1.json"
  return 0
}

# The CPU suites, one step a size (a failure at 8 ranks must not hide 16).
phase_cpu() {
  local n
  for n in $CPU_SIZES; do
    step "make test-mpi (CPU suites), GPU hidden, $n ranks" 300 \
      hidden mpich suite test-mpi "$V/bin/mpiexec" "$n" MPI_SIZES="$n" MPI=mpich MPI_ODD=0
  done
  if [[ ${CPU_VISIBLE:-1} != 0 ]]; then
    step "make test-mpi (CPU suites), GPU visible, 2 ranks" 120 \
      mpich suite test-mpi "$V/bin/mpiexec" 2 MPI_SIZES=2 MPI=mpich
  fi
}

# pin CORES: this (sub)shell and what it starts on those cores, where taskset exists.
pin() {
  if command -v taskset >/dev/null && ((!dry)); then
    taskset -cp "$1" "$BASHPID" >/dev/null
  fi
}

# The GPU phases on 4 cores beside the CPU suites on the others, then the bench alone.
phase_session() {
  local cores gpu
  cores=$(nproc)
  if ((cores > 8)); then
    (
      pin 0-3
      phase_mpich
      phase_impi
    ) &
    gpu=$!
    (
      pin "4-$((cores - 1))"
      CPU_VISIBLE=0 phase_cpu
    )
    wait "$gpu"
  else  # too few cores to run both at once
    phase_mpich
    phase_impi
    CPU_VISIBLE=0 phase_cpu
  fi
  phase_bench
}

export OUT RUN_PY PYTHON
export -f probe

if ! install >>"$log" 2>&1; then
  note "install failed: see $name.log"
  exit 1
fi
note "installed in $(($(date +%s) - start)) s"
case $phase in
  mpich) phase_mpich ;;
  impi) phase_impi ;;
  bench) phase_bench ;;
  cpu) phase_cpu ;;
  session) phase_session ;;
  all | dry-run)
    phase_mpich
    phase_impi
    phase_bench
    phase_cpu
    ;;
  *)
    note "unknown phase $phase"
    exit 2
    ;;
esac
# The benchmark tables, from the log, in one file (phases that ran the bench).
tables=$OUT/bench-tables-$name.txt
grep -hE "^ +[0-9]+  |ranks, .*median|beat staging|overhead at 1 MB" "$log" >"$tables" ||
  rm -f "$tables"
note "done in $(($(date +%s) - start)) s"
"$PYTHON" - "$steps_json" "$OUT/summary-$name.json" "$name" "$(($(date +%s) - start))" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
failed = [s["label"] for s in steps if s["rc"] not in (0, None)]
skipped = [s["label"] for s in steps if s["skipped"]]
json.dump({"phase": sys.argv[3], "seconds": int(sys.argv[4]), "ok": not failed and not skipped,
           "failed": failed, "skipped": skipped, "steps": steps}, open(sys.argv[2], "w"), indent=1)
PY
rm -f "$steps_json"
