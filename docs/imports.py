#!/usr/bin/env python3
"""Import circles between the files of each crate (docs/architecture.md).

Usage: python3 docs/imports.py [CRATE/src ...]   (default: every crates/*/src and xtask)
Exits 1 when a circle is found.

Import circles between the files of each crate: file A -> file B when A names an item
that B defines (crate::/super::/self:: paths in `use` trees and in code, followed through
`pub use` re-exports to the defining file; a re-export itself is not an edge). `mod x;`
declarations are not edges; method calls are not seen (only paths); comments
(doc links) are ignored. Prints the strongly connected components with more than one file,
and edges that run from a file to its own ancestor module file ("up" edges) when asked."""
import os, re, sys, glob
from collections import defaultdict

def strip_comments(s):
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    out = []
    for line in s.split('\n'):
        # drop // comments outside strings (rough: strings with // are rare in paths)
        i = line.find('//')
        if i >= 0 and line[:i].count('"') % 2 == 0:
            line = line[:i]
        out.append(line)
    return '\n'.join(out)

def strip_strings(s):
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', s)

def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ('lib', 'main'):
        rel = rel[:-1]
    elif rel[-1] == 'mod':
        rel = rel[:-1]
    return tuple(rel)

def parse_use_tree(t, prefix=()):
    t = t.strip()
    res = []
    if not t:
        return res
    # split top-level by ::{ ... }
    m = re.match(r'^([A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)(?:::(\{.*\}|\*))?(?:\s+as\s+\w+)?$', t, re.S)
    if t.startswith('{') and t.endswith('}'):
        inner = t[1:-1]
        depth = 0; cur = ''
        for ch in inner:
            if ch == '{': depth += 1
            if ch == '}': depth -= 1
            if ch == ',' and depth == 0:
                res += parse_use_tree(cur, prefix); cur = ''
            else:
                cur += ch
        res += parse_use_tree(cur, prefix)
        return res
    if not m:
        return res
    head = tuple(m.group(1).split('::'))
    rest = m.group(2)
    if rest is None:
        return [prefix + head]
    if rest == '*':
        return [prefix + head + ('*',)]
    return parse_use_tree(rest, prefix + head)

def analyse(src):
    files = sorted(glob.glob(os.path.join(src, '**', '*.rs'), recursive=True))
    mods = {}
    text = {}
    for f in files:
        mods[module_of(src, f)] = f
        t = strip_strings(strip_comments(open(f).read()))
        m = re.search(r'\bmod\s+\w+\s*\{', t)
        if m:
            t = t[:m.start()] + re.sub(r'\bsuper::', 'self::', t[m.start():])
        text[f] = t
    # items defined and re-exported per file
    defined = {}
    reexp = {}
    for f in files:
        s = text[f]
        defined[f] = set(re.findall(r'\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)', s))
        defined[f] |= set(re.findall(r'\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{', s))
        r = {}
        for m in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', s):
            for p in parse_use_tree(m.group(1)):
                r[p[-1]] = p
        reexp[f] = r
    def absolute(f, p):
        me = module_of(src, f)
        base = list(me)
        p = list(p)
        if p[0] == 'crate':
            base = []; p = p[1:]
        elif p[0] in ('super', 'self'):
            while p and p[0] in ('super', 'self'):
                if p[0] == 'super': base = base[:-1]
                p = p[1:]
        elif tuple(base + p[:1]) in mods:
            pass  # a child module of this one (2018 paths)
        else:
            return None  # another crate
        return tuple(base + p)
    def resolve(path, seen=0):
        # deepest module prefix that is a file
        for k in range(len(path), -1, -1):
            mod = path[:k]
            if mod in mods:
                f = mods[mod]
                rest = path[k:]
                if not rest or rest[0] == '*':
                    return f
                name = rest[0]
                if name in reexp[f] and name not in defined[f] and seen < 10:
                    tgt = absolute(f, reexp[f][name])
                    if tgt is not None:
                        return resolve(tgt + tuple(rest[1:]), seen + 1)
                    return None  # re-exported from another crate
                return f
        return None
    edges = defaultdict(set)
    for f in files:
        s = text[f]
        children = set(re.findall(r'\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;', s))
        roots = ('crate', 'super', 'self') + tuple(children)
        paths = []
        for m in re.finditer(r'\buse\s+([^;]+);', s):
            paths += [p for p in parse_use_tree(m.group(1)) if p[0] in roots]
        alt = '|'.join(roots)
        for m in re.finditer(r'(?<![\w:$])((?:' + alt + r')(?:::[A-Za-z_][A-Za-z0-9_]*)+)', s):
            paths.append(tuple(m.group(1).split('::')))
        paths = [('self',) + p if p[0] in children else p for p in paths]
        # a parent's `pub use child::x` is its surface, not a use
        pubuse = set()
        for m in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]+);', s):
            pubuse |= {('self',) + p if p[0] in children else p for p in parse_use_tree(m.group(1))}
        me = module_of(src, f)
        for p in paths:
            a = absolute(f, p)
            if a is None: continue
            t = resolve(a)
            if t is None or t == f: continue
            tm = module_of(src, t)
            if p in pubuse:
                continue  # a re-export: paths through it are followed to the defining file
            edges[f].add(t)
    return files, edges

def sccs(nodes, edges):
    index = {}; low = {}; st = []; on = set(); out = []; i = [0]
    sys.setrecursionlimit(10000)
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    for v in nodes:
        if v not in index: visit(v)
    return out

total = 0
roots = sys.argv[1:] or sorted(glob.glob('crates/*/src')) + ['xtask/src', 'xtask/testbed/src']
for src in roots:
    files, edges = analyse(src)
    comps = [c for c in sccs(files, edges) if len(c) > 1]
    nedges = sum(len(v) for v in edges.values())
    print(f'{src}: {len(files)} files, {nedges} edges, {len(comps)} circles')
    for c in comps:
        total += 1
        print('  circle:', ' '.join(sorted(os.path.relpath(x, src) for x in c)))
        for a in sorted(c):
            for b in sorted(edges[a]):
                if b in c:
                    print('     ', os.path.relpath(a, src), '->', os.path.relpath(b, src))
sys.exit(1 if total else 0)
