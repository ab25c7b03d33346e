#!/usr/bin/env python3
"""Counts the structure figures issue #36 tracks, so a re-layout can be measured before and after.

    python3 .ci/structure-counts.py [REPO]          # default: the repository this file is in

Per crate (mirror-engine, proxy), over the crate's `src/` module tree (parsed from `mod` lines,
`#[path]` children belong to the module that declares them; `#[cfg(test)]` modules are left out),
for the crate root and again inside every folder (there the folder's own mod.rs plays the root):

* top-level nodes: the crate root's child modules (a folder and its files count as one node);
  the crate root itself is a node only when something imports an item it defines (not a re-export);
* arrows: distinct (from, to) pairs of top-level nodes, from `use crate::…` / `super::…` paths and
  inline `crate::x::…` paths in non-test code; a crate-root name re-exported with `pub use a::…`
  counts as an arrow to `a`;
* cycles: strongly connected components of more than one node (and the nodes in them);
* back-up arrows: arrows into the crate root (it declares every module, so anything that imports
  what the root defines points up), plus the arrows a layering must reverse to cut every cycle
  (greedy: inside each component, arrows that point back in a depth-first order);
* layers: the longest path in the graph of components;
* files, folders with a module doc (`//!` at the top of mod.rs), and `#[path]` attributes.

Workspace-wide:
* backoff loops: lines that double a delay and cap it (`(x * 2).min(…)` naming a backoff);
* hand-rendered metrics files: Rust files that write OpenMetrics `# TYPE` lines themselves;
* re-declared error codes: `const NAME: i16 = n` whose name and value are a Kafka error code in
  kafka-protocol's `ResponseError` table (vendor/kafka-protocol/src/error.rs).
"""
import collections
import os
import re
import sys

REPO = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_tests(text):
    """Drops `#[cfg(test)] mod x { … }` blocks and comments, so test-only imports do not count."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def module_tree(src, root_file):
    """Maps every module file to its module path (tuple of names), following `mod x;` lines."""
    files = {}

    def visit(path, modpath, is_dir_owner):
        files[path] = modpath
        text = read(path)
        base = os.path.dirname(path) if is_dir_owner else os.path.join(os.path.dirname(path), os.path.splitext(os.path.basename(path))[0])
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            attrs, name = m.group(1), m.group(2)
            if "cfg(test)" in attrs.replace(" ", ""):
                continue  # test-only modules are not part of the structure
            pm = re.search(r'#\[path\s*=\s*"([^"]+)"\]', attrs)
            if pm:
                child = os.path.normpath(os.path.join(os.path.dirname(path), pm.group(1)))
                if child not in files:
                    visit(child, modpath + (name,), False)
                continue
            for cand, owner in ((os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)):
                if os.path.exists(cand):
                    visit(cand, modpath + (name,), owner)
                    break

    visit(os.path.join(src, root_file), (), True)
    return files


def expand_use(body):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']"""
    body = re.sub(r"\s+", "", body)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def go(s):
        i = s.find("{")
        if i < 0:
            return [s]
        prefix, inner = s[:i], s[i + 1 : s.rfind("}")]
        return [prefix + r for p in split_top(inner) for r in go(p)]

    return [p for p in go(body) if p]


def graph_figures(files, scope):
    """The import graph among the child modules of `scope` (a module path): nodes, arrows, cycles,
    back-up arrows (into what the scope's own file defines, or against a cycle-cutting order), layers."""
    root_path = next(p for p, mp in files.items() if mp == scope)
    inner = {p: mp for p, mp in files.items() if mp[: len(scope)] == scope and mp != scope}
    children = {mp[len(scope)] for mp in inner.values()}
    root_text = strip_tests(read(root_path))
    reexport = {}
    for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", root_text):
        for p in expand_use(m.group(1)):
            segs = p.replace("self::", "").split("::")
            last = segs[-1]
            name = last.split("as")[-1] if "as" in last else last
            if segs and segs[0] in children:
                reexport[name] = segs[0]
    arrows = collections.Counter()

    def target(modpath, path):
        segs = path.split("::")
        cur = list(modpath)
        if segs[0] == "crate":
            cur, segs = [], segs[1:]
        elif segs[0] == "super":
            while segs and segs[0] == "super":
                cur = cur[:-1]
                segs = segs[1:]
        elif segs[0] == "self":
            segs = segs[1:]
        else:
            return None
        full = tuple(cur + segs)
        if full[: len(scope)] != scope or len(full) == len(scope):
            return None
        head = full[len(scope)]
        if head in children:
            return head
        if head in reexport:
            return reexport[head]
        if head in ("self", "*") or not re.match(IDENT, head):
            return None
        return "<root>"

    for path, modpath in inner.items():
        text = strip_tests(read(path))
        me = modpath[len(scope)]
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            paths.extend(expand_use(m.group(1)))
        paths.extend(re.findall(r"\b((?:crate|super)(?:::" + IDENT + r")+)", text))
        # a child module's own `mod` file is `scope::child`; `super::` from a deeper file is handled by target()
        for p in paths:
            t = target(modpath if os.path.basename(path) != "mod.rs" else modpath, p)
            if t and t != me:
                arrows[(me, t)] += 1
    nodes = set(children) | {t for _, t in arrows}
    graph = collections.defaultdict(set)
    for a, b in arrows:
        graph[a].add(b)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
            comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    cycles = [c for c in comps if len(c) > 1]
    back = [(a, b) for (a, b) in arrows if b == "<root>"]
    for comp in cycles:
        members, seen, done = set(comp), set(), set()

        def dfs(v):
            seen.add(v)
            for w in sorted(graph[v] & members):
                if w in seen and w not in done:
                    back.append((v, w))
                elif w not in seen:
                    dfs(w)
            done.add(v)

        dfs(comp[0])
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    depth = {}

    def layer(i):
        if i not in depth:
            depth[i] = 1 + max((layer(comp_of[w]) for v in comps[i] for w in graph[v] if comp_of[w] != i), default=0)
        return depth[i]

    return {
        "nodes": len(nodes),
        "layers": max((layer(i) for i in range(len(comps))), default=0),
        "arrows": len(arrows),
        "cycles": cycles,
        "back-up arrows": sorted(set(back)),
    }


def crate_figures(crate):
    src = os.path.join(REPO, crate, "src")
    files = module_tree(src, "lib.rs")
    top = graph_figures(files, ())
    folders = {}
    for mp in sorted(set(files.values())):
        if mp and any(m[: len(mp)] == mp and len(m) > len(mp) for m in files.values()):
            g = graph_figures(files, mp)
            if g["cycles"] or g["back-up arrows"]:
                folders["/".join(mp)] = g
    rs_files = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".rs")]
    undocumented = []
    for d, _, fs in os.walk(src):
        if d != src and any(f.endswith(".rs") for f in fs):
            mod = os.path.join(d, "mod.rs")
            if not os.path.exists(mod):
                mod = d + ".rs"  # `x.rs` beside `x/`
            if not os.path.exists(mod) or not read(mod).lstrip().startswith("//!"):
                undocumented.append(os.path.relpath(d, src))
    path_attrs = sum(len(re.findall(r"#\[path\s*=", read(f))) for f in rs_files)
    over = sorted((sum(1 for _ in open(f, encoding="utf-8")), os.path.relpath(f, REPO)) for f in rs_files)
    out = {
        "files": len(rs_files),
        "top-level nodes": top["nodes"],
        "layers": top["layers"],
        "arrows": top["arrows"],
        "cycles (top level)": top["cycles"],
        "back-up arrows (top level)": top["back-up arrows"],
    }
    out["cycles inside folders"] = [f"{k}: {c}" for k, g in folders.items() for c in g["cycles"]]
    out["back-up arrows inside folders"] = [f"{k}: {a} -> {b}" for k, g in folders.items() for a, b in g["back-up arrows"]]
    out["#[path] attributes"] = path_attrs
    out["folders whose module file has no //! doc"] = undocumented
    out["files over 550 lines"] = [f"{p} ({n})" for n, p in over if n > 550]
    return out


def workspace_figures():
    crates = ["config", "protocol", "mirror-engine", "proxy"]
    rs = [
        os.path.join(d, f)
        for c in crates
        for d, _, fs in os.walk(os.path.join(REPO, c, "src"))
        for f in fs
        if f.endswith(".rs")
    ]
    backoff = []
    metrics = []
    for f in rs:
        for n, line in enumerate(read(f).splitlines(), 1):
            if re.search(r"\*\s*2\)\.min\(", line) and re.search(r"(?i)backoff", line):
                backoff.append(f"{os.path.relpath(f, REPO)}:{n}")
        if re.search(r'# TYPE ', strip_tests(read(f))):
            metrics.append(os.path.relpath(f, REPO))
    table = {}
    for name, code in re.findall(r"\((\w+),\s*(-?\d+),\s*(?:true|false),", read(os.path.join(REPO, "vendor/kafka-protocol/src/error.rs"))):
        table[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()] = int(code)
    redeclared = []
    for f in rs:
        for n, line in enumerate(read(f).splitlines(), 1):
            m = re.search(r"const\s+(\w+)\s*:\s*i16\s*=\s*(-?\d+)\s*;(.*)", line)
            if not m:
                continue
            name, code, rest = m.group(1), int(m.group(2)), m.group(3)
            named = table.get(name) == code or any(table.get(w) == code for w in re.findall(r"[A-Z_]{4,}", rest))
            if code != 0 and (named or (code in table.values() and name.endswith("_CODE"))):
                redeclared.append(f"{os.path.relpath(f, REPO)}:{n} {name}")
    return {
        "backoff loops": backoff,
        "hand-rendered metrics files": metrics,
        "re-declared Kafka error codes": redeclared,
    }


def main():
    for crate in ("mirror-engine", "proxy"):
        figs = crate_figures(crate)
        print(f"== {crate}")
        for k, v in figs.items():
            if isinstance(v, list):
                print(f"  {k}: {len(v)}" + "".join(f"\n      {x}" for x in v))
            else:
                print(f"  {k}: {v}")
    print("== workspace")
    for k, v in workspace_figures().items():
        print(f"  {k}: {len(v)}" + "".join(f"\n      {x}" for x in v))


if __name__ == "__main__":
    main()
