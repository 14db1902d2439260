"""Compares the third-party units of two cargo builds (their `--message-format json` output):
every crate the first build compiled must be reused as it is by the second, which may only add
crates of its own (those only tests and benchmarks use). A crate the second build compiles
again with other features, or against differently built dependencies, fails the check.

Usage: python3 scripts/one-build.py FIRST.json SECOND.json
"""

import json
import os
import sys


def units(path):
    """package id -> {(target kinds, features, output file names)} of its third-party units."""
    found = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            message = json.loads(line)
            if message.get("reason") != "compiler-artifact":
                continue
            package = message["package_id"]
            if package.startswith("path+"):
                continue  # duet's own crates: the test build compiles them as tests too
            # The file names carry cargo's hash of features, profile and dependencies.
            unit = (
                tuple(message["target"]["kind"]),
                tuple(message["features"]),
                tuple(sorted(os.path.basename(n) for n in message["filenames"])),
            )
            found.setdefault(package, set()).add(unit)
    return found


def name(package):
    return package.rsplit("#", 1)[-1]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    first_path, second_path = sys.argv[1:]
    first, second = units(first_path), units(second_path)
    if len(first) < 100 or len(second) < 100:
        sys.exit(
            f"one-build: too few third-party crates ({len(first)} in {first_path}, "
            f"{len(second)} in {second_path}): was the output cargo's --message-format json?"
        )
    rebuilt = []
    for package, built in sorted(second.items()):
        extra = built - first.get(package, set())
        if package in first and extra:
            rebuilt.append((package, extra))
    added = sorted(name(p) for p in second if p not in first)
    print(
        f"one-build: first build {len(first)} third-party crates, second {len(second)}; "
        f"the second adds {len(added)} ({', '.join(added) or 'none'})"
    )
    if not rebuilt:
        print("one-build: the second build reuses every third-party crate of the first")
        return
    print(f"one-build: the second build compiles {len(rebuilt)} crates of the first again:")
    for package, extra in rebuilt:
        before = sorted({u[1] for u in first[package]})
        after = sorted({u[1] for u in extra})
        if before != after:
            shown = lambda sets: " / ".join("[" + ", ".join(f) + "]" for f in sets)
            print(f"  {name(package)}: features {shown(after)} where the first had {shown(before)}")
        else:
            print(f"  {name(package)}: same features, built against other dependency builds")
    sys.exit(1)


if __name__ == "__main__":
    main()
