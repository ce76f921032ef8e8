#!/usr/bin/env python3
"""Fails (exit 1) on a cycle among the engine crate's top-level modules.

Reads every `crate::...` path in engine/src/**/*.rs (a `use crate::{a, b::c}` group included),
maps each file to its top-level module (engine/src/x.rs and engine/src/x/** are module `x`)
and each path to the top-level module it names, and looks for a cycle in that graph. A module
using its own submodules is no edge. Test code (`#[cfg(test)] mod tests { ... }` to the end of
the file) is skipped: tests may reach anywhere.

Known edges: the few in `KNOWN_EDGES` below close cycles that predate this check, in modules
other engineers own (the cursor trait in `read` that storage implements; the block cache
holding `sst` blocks). They are reported and left out of the graph; every other cycle fails.
Remove an entry once its cycle is gone: an entry that no longer matches an edge fails too.

Usage: python3 scripts/check-module-cycles.py [engine/src]
"""
import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "engine" / "src"
CRATE_PATH = re.compile(r"crate::([A-Za-z_][A-Za-z0-9_]*)")
USE_GROUP = re.compile(r"use\s+crate::\{([^;]*)\};", re.S)
IDENT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")

# (from, to): why the edge is tolerated.
KNOWN_EDGES = {
    ("cache", "sst"): "cache.rs stores sst::block::Block; sst/reader.rs reads through the cache",
    ("memstore", "read"): "memstore implements read::cursor::CellCursor; read::rows reads memstores",
    ("sst", "read"): "sst/reader.rs implements read::cursor::CellCursor",
    ("retention", "read"): "retention drives a read::cursor::CellCursor",
    ("region", "read"): "region builds read::cursor merges and holds read::pins; read::rows reads regions",
}


def module_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    if rel.parts[0] in ("lib.rs", "main.rs", "bin"):
        return None
    return rel.parts[0].removesuffix(".rs")


def group_heads(group: str) -> list[str]:
    """The first name of each top-level item of a `use crate::{...}` group (`a::b` gives `a`)."""
    heads, depth, item = [], 0, ""
    for ch in group + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            name = IDENT.match(item)
            if name:
                heads.append(name.group(1))
            item = ""
        elif depth == 0:
            item += ch
    return heads


def strip_tests_and_comments(text: str) -> str:
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def main() -> int:
    modules = {module_of(p) for p in ROOT.rglob("*.rs")} - {None}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for path in sorted(ROOT.rglob("*.rs")):
        src = module_of(path)
        if src is None:
            continue
        text = strip_tests_and_comments(path.read_text())
        targets = set(CRATE_PATH.findall(text))
        for group in USE_GROUP.findall(text):
            targets.update(group_heads(group))
        for t in targets:
            if t in modules and t != src:
                edges[src].add(t)

    stale = [e for e in KNOWN_EDGES if e[1] not in edges.get(e[0], set())]
    for e in stale:
        print(f"known edge {e[0]} -> {e[1]} no longer exists: remove it from KNOWN_EDGES")
    for (a, b), why in sorted(KNOWN_EDGES.items()):
        if b in edges.get(a, set()):
            print(f"tolerated (known, pre-existing): {a} -> {b}: {why}")
            edges[a].discard(b)
    cycles = find_cycles(edges)
    if stale:
        return 1
    if cycles:
        for c in cycles:
            print("module cycle: " + " -> ".join(c))
        return 1
    print(f"no cycle among the {len(modules)} top-level modules of {ROOT}")
    return 0


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)

    cycles = []
    for component in components:
        # Shortest path back to the start, breadth first, inside the component.
        start = min(component)
        previous = {start: None}
        queue = [start]
        cycle = None
        while queue and cycle is None:
            v = queue.pop(0)
            for w in sorted(edges[v] & component):
                if w == start:
                    path = [v]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    cycle = list(reversed(path)) + [start]
                    break
                if w not in previous:
                    previous[w] = v
                    queue.append(w)
        cycles.append(cycle)
        # Every other module of the component too, each on a cycle of its own through it.
        for other in sorted(component - set(cycle)):
            cycles.append(path_between(edges, component, other, other))
    return cycles


def path_between(edges: dict[str, set[str]], component: set[str], start: str, goal: str) -> list[str]:
    previous = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & component):
            if w == goal:
                path = [v]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return list(reversed(path)) + [goal]
            if w not in previous:
                previous[w] = v
                queue.append(w)
    return [start]


if __name__ == "__main__":
    sys.exit(main())
