#!/usr/bin/env python3
"""Fails when the source files of a crate import each other in a loop.

A file is a module (`foo.rs`, or `foo/mod.rs` for a folder); file A imports file B when A
names a path into B: `use crate::b::X`, `crate::b::f()`, `super::X`, `self::b::X`, or a
`use` of a child module declared in A (`mod b; use b::X;`). A `mod b;` declaration alone
is not an import: a parent holds its children, and a child may use its parent's items, but
a parent that also takes names from its child closes a loop, and so does any longer chain.
A `pub use b::X` re-export is a facade, not an import: a path through it (`crate::X`) is
followed to the module that defines `X`.

Usage: scripts/check-cycles.py [CRATE_SRC_DIR ...]  (default: every crate's src/ here)
Exit status 1 and the loops on stderr when there is one.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["broker/src", "metadata/src", "cache/src", "objstore/src", "cli/src"]

COMMENT = re.compile(r"//[^\n]*")
# `crate::a::b`, `super::super::a`, `self::a` — the path as far as it goes.
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
# `use a::b::{...}` of a child module (no crate/super/self prefix).
LOCAL_USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([a-z_][a-z0-9_]*)::", re.M)
PUB_USE = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", re.M)
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", re.M)


def module_of(src: Path, f: Path) -> tuple:
    rel = f.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip_tests(text: str) -> str:
    """Drops `#[cfg(test)] mod x { ... }` blocks: tests may reach anywhere."""
    out, i = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def inline_super(text: str) -> str:
    """Inside an inline `mod x { ... }`, `super::` is the file's own module: rewrite it to
    `self::` so it resolves there (one level of nesting, which is all the code has)."""
    out, i = [], 0
    for m in INLINE_MOD.finditer(text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[i : m.end()])
        out.append(text[m.end() : j].replace("super::", "self::"))
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(modules: set, path: tuple, reexports: dict, depth: int = 0) -> tuple:
    """The module file that defines what `path` names: its longest prefix that is a module,
    followed through that module's re-exports."""
    for n in range(len(path), -1, -1):
        if path[:n] in modules:
            m, rest = path[:n], path[n:]
            if rest and rest[0] in reexports.get(m, {}) and depth < 8:
                return resolve(modules, reexports[m][rest[0]] + rest[1:], reexports, depth + 1)
            return m
    return ()


def absolute(m: tuple, path: str) -> tuple:
    """`crate::a::b`, `super::a`, `self::a` or a child's `a::b`, from module `m`."""
    names = tuple(p for p in path.split("::") if p)
    if not names:
        return m
    if names[0] == "crate":
        return names[1:]
    if names[0] == "self":
        return m + names[1:]
    if names[0] == "super":
        base = m[:-1]
        names = names[1:]
        while names and names[0] == "super":
            base, names = base[:-1], names[1:]
        return base + names
    return m + names


def reexports_of(files: dict) -> dict:
    """Per module: name -> the path it re-exports (`pub use a::b::{C, D as E}`)."""
    out = {}
    for m, f in files.items():
        text = COMMENT.sub("", f.read_text())
        table = {}
        for body in PUB_USE.findall(text):
            body = " ".join(body.split())
            if "{" in body:
                prefix, inner = body.split("{", 1)
                items = [prefix + i.strip() for i in inner.rstrip("}").split(",") if i.strip()]
            else:
                items = [body]
            for item in items:
                path, _, alias = item.partition(" as ")
                path = path.strip().rstrip(":")
                name = (alias or path.split("::")[-1]).strip()
                if path.startswith(("crate", "self", "super")) or "::" in path:
                    table[name] = absolute(m, path)
        out[m] = table
    return out


def graph(src: Path) -> dict:
    files = {module_of(src, f): f for f in src.rglob("*.rs")}
    modules = set(files)
    reexports = reexports_of(files)
    edges = {m: set() for m in modules}
    for m, f in files.items():
        text = strip_tests(COMMENT.sub("", f.read_text()))
        # Re-exports are facades, not imports (see the module doc).
        text = inline_super(PUB_USE.sub("", text))
        for kind, rest in PATH.findall(text):
            # A child naming its parent's items is an edge like any other: it closes a loop
            # only if the parent also takes names from the child.
            target = resolve(modules, absolute(m, kind + rest), reexports)
            if target != m:
                edges[m].add(target)
        children = set(MOD_DECL.findall(text))
        for name in LOCAL_USE.findall(text):
            if name in children:
                target = resolve(modules, m + (name,), reexports)
                if target != m:
                    edges[m].add(target)
    return {m: {t for t in ts if t in modules} for m, ts in edges.items()}


def cycles(edges: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def name(src: str, m: tuple) -> str:
    return f"{src}:" + ("::".join(m) or "crate")


def main() -> int:
    dirs = sys.argv[1:] or DEFAULT
    bad = 0
    for d in dirs:
        src = (ROOT / d).resolve()
        edges = graph(src)
        for comp in cycles(edges):
            bad += 1
            print(f"import cycle in {d}:", file=sys.stderr)
            for m in comp:
                into = sorted(name(d, t) for t in edges[m] if t in comp)
                print(f"  {name(d, m)} -> {', '.join(into)}", file=sys.stderr)
        print(f"{d}: {len(edges)} modules, {sum(map(len, edges.values()))} imports, "
              f"{len(cycles(edges))} cycles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
