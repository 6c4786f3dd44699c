#!/usr/bin/env python3
"""Where a kernel's warps wait, per machine instruction (scripts/gpu-check.sh NCU_SOURCE=1).

Reads the CSV that `ncu --section SourceCounters --page source --print-source sass --csv` prints for one kernel
launch and prints: the total of the stall samples, their share by opcode (with modifiers: F2F.BF16.F64 and
F2F.F64.F32 are different costs), and the instructions that hold the most samples with the stall reasons that
dominate them. Columns are found by name, so that the summary survives ncu versions that add or reorder columns;
a CSV without the expected columns is reported as such (the raw CSV is kept beside the summary).
  usage: scripts/ncu_source_summary.py FILE.csv[.gz] [TOP]
"""
import collections
import csv
import gzip
import io
import re
import sys

SAMPLES = re.compile(r"warp stall sampling \(all", re.I)
NOT_ISSUED = re.compile(r"warp stall sampling \(not.issued", re.I)
EXECUTED = re.compile(r"^instructions executed$", re.I)
OPCODE = re.compile(r"^\s*(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")


def number(text):
    try:
        return float(text.replace(",", "")) if text.strip() else 0.0
    except ValueError:
        return 0.0


def rows(path):
    raw = gzip.open(path, "rb").read() if path.endswith(".gz") else open(path, "rb").read()
    lines = raw.decode("utf-8", "replace").splitlines()
    # ncu prints its own lines (==PROF== ...) before the table: the table starts at the header with "Source".
    start = next((i for i, line in enumerate(lines) if '"Source"' in line or line.startswith("Source,")), None)
    if start is None:
        return None, []
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = next(reader)
    return header, [r for r in reader if len(r) == len(header)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    header, table = rows(path)
    if header is None:
        print(f"{path}: no source table found (ncu printed no 'Source' header)")
        return
    col = {name: i for i, name in enumerate(header)}
    source = col.get("Source")
    address = next((i for name, i in col.items() if name.lower() in ("address", "# address")), None)
    samples = next((i for name, i in col.items() if SAMPLES.search(name)), None)
    executed = next((i for name, i in col.items() if EXECUTED.search(name)), None)
    # Per-reason sample columns: "stall_*" style names or names ending in "(Samples)" other than the totals.
    reasons = [(name, i) for name, i in col.items()
               if i not in (samples, executed) and not NOT_ISSUED.search(name)
               and (name.lower().startswith("stall") or "stall" in name.lower() and "sampl" in name.lower())]
    if source is None or samples is None:
        print(f"{path}: columns not recognised; header: {header[:12]}")
        return
    total = sum(number(r[samples]) for r in table)
    issued = sum(number(r[executed]) for r in table) if executed is not None else 0.0
    print(f"{path}: {len(table)} instructions, {total:.0f} stall samples"
          + (f", {issued:.0f} warp instructions executed" if executed is not None else ""))
    if total == 0:
        return
    by_opcode = collections.Counter()
    for r in table:
        m = OPCODE.match(r[source])
        by_opcode[m.group(2) if m else "?"] += number(r[samples])
    print("  samples by opcode: " + ", ".join(f"{op} {n / total:.1%}" for op, n in by_opcode.most_common(14)))
    print(f"  the {top} instructions with the most samples:")
    for r in sorted(table, key=lambda r: -number(r[samples]))[:top]:
        n = number(r[samples])
        parts = sorted(((number(r[i]), name) for name, i in reasons), reverse=True)[:3]
        why = ", ".join(f"{name} {v:.0f}" for v, name in parts if v > 0)
        where = r[address] if address is not None else ""
        print(f"  {n / total:6.2%} {where:>8} {r[source].strip()[:60]:60} {why}")


if __name__ == "__main__":
    main()
