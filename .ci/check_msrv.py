"""The declared MSRV (Cargo.toml's rust-version) is not below what the locked
dependencies declare.

Reads `cargo metadata --locked` and follows the dependency graph from tensorplay
over normal and build dependencies (every feature on): what building the library,
and so the wheel, compiles. Dev-dependencies are left out: they build the tests
(proptest 1.12 needs Rust 1.88), not what a user builds. A dependency that
declares no rust-version is not counted; .ci/msrv also builds with the declared
toolchain where it can be installed, which catches those.
"""
from __future__ import annotations

import json
import subprocess
import sys


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def main() -> int:
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
        check=True, capture_output=True, text=True).stdout)
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = metadata["resolve"]["root"]
    declared = packages[root]["rust_version"]
    if not declared:
        print("check_msrv: Cargo.toml declares no rust-version")
        return 1

    seen = {root}
    todo = [root]
    while todo:
        for dep in nodes[todo.pop()]["deps"]:
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])

    needs = sorted(((version(packages[p]["rust_version"]), packages[p]["name"], packages[p]["version"])
                    for p in seen - {root} if packages[p]["rust_version"]), reverse=True)
    above = [(v, name, ver) for v, name, ver in needs if v > version(declared)]
    if above:
        for v, name, ver in above:
            print(f"check_msrv: {name} {ver} needs Rust {'.'.join(map(str, v))}, above the declared "
                  f"rust-version {declared}")
        print("check_msrv: raise rust-version in Cargo.toml (and docs/install.md), or lock older versions")
        return 1
    top = needs[0] if needs else None
    print(f"check_msrv: rust-version {declared} covers the {len(seen) - 1} locked dependencies of the library"
          + (f" (the highest: {top[1]} {top[2]}, Rust {'.'.join(map(str, top[0]))})" if top else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
