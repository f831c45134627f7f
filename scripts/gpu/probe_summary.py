"""Summarises probe_cuda_mpi.py's results: which cases passed, failed or crashed the process.

A case with only its ``started`` line crashed (or hung) the probe: ``device_run.sh`` reran the
probe past it. Writes the summary as JSON and prints it; exit status 1 if any case did not pass.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    cases: dict[str, dict[str, Any]] = {}
    for record in records:
        known = cases.get(record["case"])
        if known is None or "started" in known:
            cases[record["case"]] = record
    out: dict[str, Any] = {"cases": 0, "ok": [], "failed": {}, "crashed": []}
    for name, record in cases.items():
        if "value" in record:
            out["query"] = record
            continue
        out["cases"] += 1
        if "ok" not in record:
            out["crashed"].append(name)
        elif record["ok"]:
            out["ok"].append(name)
        else:
            out["failed"][name] = record.get("errors", [])
    return out


def main(results: str, summary: str) -> int:
    with open(results) as f:
        out = summarise([json.loads(line) for line in f if line.strip()])
    with open(summary, "w") as f:
        json.dump(out, f, indent=1)
    query = out.get("query", {})
    print(
        f"probe: {out['cases']} cases, {len(out['ok'])} ok, {len(out['failed'])} failed, "
        f"{len(out['crashed'])} crashed; MPIX_Query_cuda_support={query.get('value')} "
        f"({query.get('library')}, {query.get('size')} ranks)"
    )
    for name, errors in out["failed"].items():
        print(f"  FAILED {name}: {errors}")
    for name in out["crashed"]:
        print(f"  CRASHED {name}")
    return 1 if out["failed"] or out["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
