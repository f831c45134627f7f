"""The benchmark's plot: each variant's time per call as a ratio to its own case's raw mpi4py
baseline, per message size.

Each case of the benchmark (``bench.py``) is measured in its own phase with its own raw
baseline, so absolute times or bandwidths from different cases do not compare: a line drawn
from one phase against another phase's baseline looked 3x slower at 1 MB and 1.8x faster at
16 MB than the table said. Ratios to the row's own baseline (the table's ``ratio`` column) do.
The figure names the MPI library, the number of ranks and the date of the run.

matplotlib is an optional extra (``pip install 'mwms-mpi[plot]'``); it is imported only here.
"""

from __future__ import annotations

from typing import Any

# (case, variant, label) of the lines drawn, in legend order; each against its case's baseline.
LINES = (
    ("all_reduce float32", "all_reduce", "Communicator.all_reduce"),
    ("all_reduce float32", "all_reduce(check=first)", "Communicator.all_reduce, check=first"),
    ("all_reduce float32", "all_reduce(timeline)", "Communicator.all_reduce, timeline on"),
    ("strategy.reduce f32", "strategy.reduce", "Strategy.reduce"),
)


def series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Each drawn line's (message size, ratio to its own case's raw baseline) points."""
    out: dict[str, list[tuple[int, float]]] = {}
    for case, variant, label in LINES:
        points = sorted(
            (int(r["bytes"]), float(r["ratio"]))
            for r in rows
            if r["case"] == case and r["variant"] == variant and r["baseline"] == "raw"
        )
        if points:
            out[label] = points
    return out


def title(rows: list[dict[str, Any]], library: str, when: str) -> str:
    """What the figure says it shows: ranks, MPI library, date."""
    ranks = rows[0]["ranks"] if rows else "?"
    return f"time per call / raw mpi4py Allreduce, {ranks} ranks, {library}, {when}"


def ratios(rows: list[dict[str, Any]], path: str, library: str, when: str) -> None:
    """Draws :func:`series` (log-2 sizes, log ratios, 1.0 = raw) and saves ``path``.

    Raises:
      SystemExit: when matplotlib is not installed, saying how to get it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "mwms-mpi bench --plot needs matplotlib: pip install 'mwms-mpi[plot]'"
        ) from None
    figure, axes = plt.subplots(figsize=(8, 4.8))
    axes.axhline(1.0, color="black", linestyle="--", label="raw mpi4py Allreduce (each case's own)")
    for label, points in series(rows).items():
        sizes, values = zip(*points, strict=True)
        axes.plot(sizes, values, marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("message size (bytes, float32 SUM)")
    axes.set_ylabel("time per call / raw (median)")
    axes.set_title(title(rows, library, when), fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
