#!/usr/bin/env python3
"""Import circles between the files of each crate.

    python3 scripts/module-circles.py [--max N] [--all]

Reads every `crates/*/src/**.rs` (tests modules and comments left out) and draws an edge from a
file to each file of the same crate it names: `crate::a::b` paths (a name the crate root
re-exports with `pub use` counts as the module it comes from), `super::` paths and globs, and
in the crate root, paths that start with one of its modules (its own `pub use` re-exports are a
facade, not a dependency). Prints every strongly connected set of more than N files (default 2;
with --all, of more than one) with the edges inside it, and exits 1 when there is one: a reader
can then not take its files in any order.
"""
import collections
import os
import re
import sys

PUB_USE = re.compile(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);")


def crate_files(src):
    """Module path ('' for the root, 'a::b') -> file."""
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                parts = os.path.relpath(path, src)[:-3].split("/")
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                files["::".join(parts)] = path
    return files


def code_of(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)
    return re.sub(r"//.*", "", text)


def reexports(root_code, mods):
    """Names the crate root re-exports -> the module they come from."""
    names = {}
    for m in PUB_USE.finditer(root_code):
        body = " ".join(m.group(1).split())
        parts = [p.strip() for p in body.split("::")]
        mod = parts[1] if parts[0] == "crate" and len(parts) > 1 else parts[0]
        if mod not in mods:
            continue
        if "{" in body:
            for name, alias in re.findall(r"(\w+)\s*(?:as\s+(\w+))?\s*[,}]", body + "}"):
                names[alias or name] = mod
        else:
            names[parts[-1].split(" as ")[-1].strip()] = mod
    return names


def longest_prefix(path, mods):
    for i in range(len(path), -1, -1):
        cand = "::".join(path[:i])
        if cand in mods:
            return cand
    return None


def edges_of(files):
    mods = set(files)
    codes = {m: code_of(p) for m, p in files.items()}
    names = reexports(codes.get("", ""), mods)
    edges = collections.defaultdict(set)
    for m, code in codes.items():
        here = m.split("::") if m else []
        targets = set()
        for hit in re.finditer(r"crate::((?:\w+::)*\w+)", code):
            path = hit.group(1).split("::")
            if path[0] in names and path[0] not in mods:
                path = [names[path[0]]]
            targets.add(longest_prefix(path, mods))
        if re.search(r"\bsuper::\*", code):
            targets.add("::".join(here[:-1]))
        for hit in re.finditer(r"\bsuper::((?:\w+::)*\w+)", code):
            targets.add(longest_prefix(here[:-1] + hit.group(1).split("::"), mods))
        if m == "":
            for hit in re.finditer(r"(?<![:\w])(\w+)::", PUB_USE.sub("", code)):
                if hit.group(1) in mods:
                    targets.add(hit.group(1))
        edges[m] = {t for t in targets if t is not None and t != m}
    return edges


def circles(nodes, edges):
    """Strongly connected sets of more than one node (Tarjan, iterative)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def main():
    args = sys.argv[1:]
    show_all = "--all" in args
    most = int(args[args.index("--max") + 1]) if "--max" in args else 2
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    worst = 0
    for crate in sorted(os.listdir("crates")):
        src = os.path.join("crates", crate, "src")
        if not os.path.isdir(src):
            continue
        files = crate_files(src)
        edges = edges_of(files)
        for comp in circles(files, edges):
            worst = max(worst, len(comp))
            if len(comp) <= most and not show_all:
                continue
            label = lambda m: m or "(root)"
            print(f"{crate}: {len(comp)} files: " + ", ".join(label(m) for m in comp))
            for m in comp:
                inside = sorted(edges[m] & set(comp))
                print(f"    {label(m)} -> " + ", ".join(label(t) for t in inside))
    print(f"largest import circle: {worst} files (at most {most} allowed)")
    sys.exit(1 if worst > most else 0)


if __name__ == "__main__":
    main()
