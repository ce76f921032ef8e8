#!/usr/bin/env python3
"""Fails if a package in the lock file's resolution declares a `rust-version` newer than the
workspace's. Reads `cargo metadata --format-version 1` on stdin."""
import json
import sys


def version(text):
    return tuple(int(x) for x in text.split("."))


meta = json.load(sys.stdin)
members = [p for p in meta["packages"] if p["id"] in meta["workspace_members"]]
declared = {version(p["rust_version"]) for p in members if p.get("rust_version")}
if len(declared) != 1 or len(members) != sum(1 for p in members if p.get("rust_version")):
    sys.exit(f"every workspace crate must declare the same rust-version; found {sorted(declared)}")
ours = declared.pop()
used = {node["id"] for node in meta["resolve"]["nodes"]}
newer = [
    f"{p['name']} {p['version']} needs Rust {p['rust_version']}"
    for p in meta["packages"]
    if p["id"] in used and p.get("rust_version") and version(p["rust_version"]) > ours
]
if newer:
    sys.exit(f"dependencies need a Rust newer than ours ({'.'.join(map(str, ours))}):\n  " + "\n  ".join(newer))
print(f"every dependency builds on Rust {'.'.join(map(str, ours))} by its rust-version")
