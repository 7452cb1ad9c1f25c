#!/usr/bin/env python3
"""Attributes `perf script -F comm,ip,sym --no-inline` samples to broker code.

For every sample, the leaf is classed (kernel, allocator, memcpy, other library, ferrobus)
and charged to the nearest ferrobus function on its stack, so time spent in malloc, memcpy
or a syscall shows up under the ferrobus function that caused it.

    perf script -i perf.data -F comm,ip,sym --no-inline | attribute.py [TOP]
"""

import collections
import sys

ALLOCATOR = ("malloc", "_int_malloc", "_int_free", "cfree", "free", "realloc",
             "malloc_consolidate", "unlink_chunk", "_int_realloc", "__rust_alloc",
             "__rust_dealloc", "__rdl_alloc", "__rdl_dealloc")


def leaf_class(address, symbol):
    if address.startswith("ffffffff"):
        return "kernel"
    if symbol.startswith(ALLOCATOR) or symbol.split("@")[0] in ALLOCATOR:
        return "allocator"
    if "memmove" in symbol or "memcpy" in symbol:
        return "memcpy"
    if symbol.startswith("ferrobus::"):
        return "ferrobus"
    return "library"


def samples(lines):
    stack = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if stack:
                yield stack
            stack = []
            continue
        if not line.startswith(("\t", " ")):
            continue  # the comm line
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            stack.append((parts[0], parts[1]))
    if stack:
        yield stack


def short(symbol):
    symbol = symbol.replace("::{{closure}}", "")
    if len(symbol) > 110:
        symbol = symbol[:107] + "..."
    return symbol


def main():
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    total = 0
    by_class = collections.Counter()
    by_owner = collections.Counter()
    by_owner_class = collections.defaultdict(collections.Counter)
    for stack in samples(sys.stdin):
        total += 1
        address, symbol = stack[0]
        kind = leaf_class(address, symbol)
        by_class[kind] += 1
        owner = next((s for _, s in stack if s.startswith("ferrobus::")), "(no ferrobus frame)")
        owner = short(owner)
        by_owner[owner] += 1
        by_owner_class[owner][kind] += 1
    if total == 0:
        print("no samples")
        return
    print(f"{total} samples")
    print("\nleaf class:")
    for kind, count in by_class.most_common():
        print(f"  {100 * count / total:5.1f}%  {kind}")
    print("\nnearest ferrobus function (self + the library, allocator, copy and kernel time "
          "it caused):")
    for owner, count in by_owner.most_common(top):
        split = ", ".join(f"{k} {100 * c / total:.1f}" for k, c in by_owner_class[owner].most_common())
        print(f"  {100 * count / total:5.1f}%  {owner}  [{split}]")


if __name__ == "__main__":
    main()
