#!/usr/bin/env python3
"""Counts the tests ``make test`` skipped, by reason, and fails if one that must run on CI did.

Run by ``make test`` at its end: ``python scripts/skip_report.py LOG [MUST_RUN]``. ``LOG`` holds
one JSON object a line (``tests/conftest.py`` appends them when ``MWMS_TEST_SKIP_LOG`` is set):
the test's id, the skip reason, the world size (``serial`` outside MPI) and whether the run used
the fake CuPy. ``MUST_RUN`` (default ``tests/must_run_on_ci.txt``) lists tests that must never
skip on CI, one a line: a node-id prefix, optionally followed by ``@ <world sizes>`` (comma
separated; ``serial`` for runs outside MPI) to name the runs where it must run. A skipped test
that matches is printed and the exit code is 1. Standard library only.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def must_run(path: Path) -> list[tuple[str, set[str] | None]]:
    """The list's entries: (node-id prefix, the world sizes it names or ``None`` for all)."""
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        prefix, _, worlds = line.partition("@")
        sizes = {w.strip() for w in worlds.split(",") if w.strip()} or None
        entries.append((prefix.strip(), sizes))
    return entries


def main(argv: list[str]) -> int:
    log = Path(argv[1])
    listed = Path(argv[2]) if len(argv) > 2 else Path("tests/must_run_on_ci.txt")
    records = []
    if log.exists():
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    by_reason: collections.Counter[str] = collections.Counter()
    for r in records:
        where = f"world {r['world']}" + (", fake GPU" if r["fake_gpu"] else "")
        by_reason[f"{r['reason']} [{where}]"] += 1
    print(f"== skipped tests: {len(records)} in all, by reason")
    for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{count:6d}  {reason}")
    rules = must_run(listed)
    broken = [
        r
        for r in records
        for prefix, sizes in rules
        if r["test"].startswith(prefix) and (sizes is None or r["world"] in sizes)
    ]
    for r in broken:
        print(f"MUST RUN ON CI, skipped: {r['test']} (world {r['world']}): {r['reason']}")
    if broken:
        print(f"{len(broken)} test(s) listed in {listed} skipped", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
