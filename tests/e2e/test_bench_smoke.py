"""The benchmark script keeps working: a quick run prints every case as a JSON record.

Speed itself is never asserted in tests (docs/architecture.md, "Speed targets"); this only keeps the
script from rotting.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.launch import REPO_ROOT, json_records, run_mpi

pytestmark = [pytest.mark.timeout(180), pytest.mark.mpi_neutral]


def test_bench_collectives_quick_run() -> None:
    script = REPO_ROOT / "scripts" / "bench_collectives.py"
    result = run_mpi(2, [sys.executable, script, "--quick", "--json-only"], timeout=150)
    assert result.returncode == 0, result.describe()
    records = json_records(result.stdout)
    variants = {(r["case"], r["bytes"], r["variant"]) for r in records}
    for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20):
        for variant in ("all_reduce", "all_reduce(check=first)", "raw", "raw_pair"):
            assert ("all_reduce float32", nbytes, variant) in variants
    for variant in ("raw_packed", "raw_each", "batch_all_reduce", "batch_all_reduce_1MB"):
        assert ("200 x 4 KB float32", 200 * 4096, variant) in variants
    for nbytes in (4 << 10, 1 << 20, 16 << 20, 64 << 20):
        assert ("strategy.reduce f32", nbytes, "strategy.reduce") in variants
        assert ("strategy.reduce f32", nbytes, "raw_pair") in variants
    assert ("batch_reduce_to 200x4KB", 200 * 4096, "batch_reduce_to") in variants
    assert ("batch_reduce_to 200x4KB", 200 * 4096, "batch_reduce_to(deterministic)") in variants
    for nbytes in (4 << 10, 1 << 20, 16 << 20):
        assert ("deterministic f32", nbytes, "all_reduce(deterministic)") in variants
    assert all(r["median_us"] > 0 and r["ranks"] == 2 for r in records)
