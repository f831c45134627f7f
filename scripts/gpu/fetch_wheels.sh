#!/usr/bin/env bash
# Fills DIR (default .device, git-ignored) with what the GPU machine lacks, for the device tool to
# carry (64 MiB at most with the working tree): the mpich and pytest-mpi wheels for its Python
# 3.12 (manylinux x86-64), and a trimmed Intel MPI 2021.14.2 (the newest impi-rt that bundles
# libfabric; with I_MPI_OFFLOAD=1 a CUDA-aware MPI) as docs/gpus.md ("Which MPIs are CUDA-aware") describes.
# Uses pip's ordinary client against the configured index.
set -euo pipefail
dir=${1:-.device}
py=${PYTHON:-python3}
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform any)
mkdir -p "$dir/wheels"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$dir/wheels" mpich==5.0.2 pytest-mpi==0.6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$tmp" impi-rt==2021.14.2
(cd "$tmp" && "$py" -m zipfile -e impi_rt-*.whl unpacked)
data=$tmp/unpacked/impi_rt-2021.14.2.data/data
impi=$dir/impi
rm -rf "$impi"
mkdir -p "$impi/lib/libfabric/prov" "$impi/bin"
cp "$data/lib/libmpi.so.12" "$impi/lib/"
cp "$data/lib/libfabric/libfabric.so.1" "$impi/lib/libfabric/"
cp "$data"/lib/libfabric/prov/{libshm-fi.so,libtcp-fi.so,librxm-fi.so} "$impi/lib/libfabric/prov/"
cp "$data"/bin/{mpiexec.hydra,hydra_pmi_proxy,hydra_bstrap_proxy} "$impi/bin/"
chmod +x "$impi"/bin/*
du -sh "$dir" "$dir"/*
total=$(du -sb "$dir" | cut -f1)
if ((total > 56 * 1024 * 1024)); then
  echo "fetch_wheels: $dir holds $total bytes: with the working tree that passes 64 MiB" >&2
  exit 1
fi
