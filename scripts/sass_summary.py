#!/usr/bin/env python3
"""Machine code of chosen kernels, summarised for instruction budgets (scripts/gpu-check.sh SASS=PATTERN).

Reads `cuobjdump -sass` output on stdin. Every function whose mangled name contains PATTERN is written to
PREFIX_<n>.sass (PREFIX_names.txt lists them), and for each it prints the instruction count, the most frequent
opcodes (with their modifiers: F2F.BF16.F64 and F2F.F64.F32 are different costs) and the same for each innermost
large loop (a backward branch spanning more than 300 instructions with no other such loop inside it: the
kernels' per-step loops), which is where the per-step figures of docs/performance.md come from.
  usage: cuobjdump -sass BINARY | scripts/sass_summary.py PATTERN PREFIX
"""
import collections
import re
import sys

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
TARGET = re.compile(r"(0x[0-9a-f]+|\.L_x_\d+)")
LOOP_MIN = 300


def functions(lines):
    name, body = None, []
    for line in lines:
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def parse(body):
    """[(address, opcode, operands)] and {label: address}."""
    code, labels, pending = [], {}, []
    for line in body:
        m = LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSTRUCTION.search(line)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending = []
            code.append((address, m.group(3), m.group(4)))
    return code, labels


def loops(code, labels):
    """(first index, last index) of every backward branch."""
    index = {address: i for i, (address, _, _) in enumerate(code)}
    found = []
    for i, (address, op, operands) in enumerate(code):
        if op.startswith("BRA"):
            m = TARGET.search(operands)
            if not m:
                continue
            target = labels.get(m.group(1)) if m.group(1).startswith(".") else int(m.group(1), 16)
            if target is not None and target <= address and target in index:
                found.append((index[target], i))
    return found


def histogram(ops, top=24):
    counts = collections.Counter(ops)
    return "  ".join(f"{op} {n}" for op, n in counts.most_common(top))


def main():
    pattern, prefix = sys.argv[1], sys.argv[2]
    names = []
    for name, body in functions(sys.stdin):
        if pattern not in name:
            continue
        n = len(names)
        names.append(name)
        with open(f"{prefix}_{n}.sass", "w") as f:
            f.writelines(body)
        code, labels = parse(body)
        print(f"[{n}] {name}: {len(code)} instructions")
        print(f"    all: {histogram([op for _, op, _ in code])}")
        big = [(a, b) for a, b in loops(code, labels) if b - a + 1 > LOOP_MIN]
        for a, b in sorted(big):
            if any((c, d) != (a, b) and a <= c and d <= b for c, d in big):
                continue  # not innermost
            print(f"    loop {code[a][0]:#x}-{code[b][0]:#x}: {b - a + 1} instructions")
            print(f"      {histogram([op for _, op, _ in code[a:b + 1]])}")
    with open(f"{prefix}_names.txt", "w") as f:
        f.writelines(f"{i} {name}\n" for i, name in enumerate(names))
    if not names:
        print(f"no kernel name contains {pattern}")


if __name__ == "__main__":
    main()
