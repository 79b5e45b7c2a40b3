#!/usr/bin/python3
"""Layering check: every #include "X/..." in src/M/ must name M itself or a module that M's row of
the module table in docs/architecture.md lists under "may include"; another module's private
header (X/*_int.h) is never allowed. Known exceptions come from the exceptions table of the same
page, and an exception that no longer occurs is an error too, so the page stays true. Every
folder under src/ must have a row. Exit 0 when clean, 1 with one line per problem.

Usage: scripts/check-layering.py [REPO_ROOT]"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
doc_path = os.path.join(root, "docs", "architecture.md")
src = os.path.join(root, "src")


def table(text, name):
    m = re.search(r"<!-- %s:begin -->\n(.*?)<!-- %s:end -->" % (name, name), text, re.S)
    if not m:
        sys.exit("check-layering: %s: no <!-- %s:begin/end --> table" % (doc_path, name))
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(cells[0]) <= set("-: ") or cells[0] in ("module", "file"):
            continue
        rows.append([c.strip("`") for c in cells])
    return rows


text = open(doc_path, encoding="utf-8").read()
allowed = {}
for cells in table(text, "layering"):
    deps = cells[2]
    allowed[cells[0]] = None if deps == "*" else {
        d.strip().strip("`") for d in deps.split(",") if d.strip() not in ("", "—", "-")}
exceptions = {(c[0], c[1]): False for c in table(text, "layering-exceptions")}

problems = []
for d in sorted(os.listdir(src)):
    if os.path.isdir(os.path.join(src, d)) and d not in allowed:
        problems.append("src/%s/: module missing from the table in docs/architecture.md" % d)

inc = re.compile(r'^\s*#\s*include\s+"([a-z0-9_]+)/([^"]+)"', re.M)
for dirpath, _, files in os.walk(src):
    for f in sorted(files):
        if not f.endswith((".c", ".h")):
            continue
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        parts = rel.split("/")
        module = parts[1] if len(parts) > 2 else os.path.splitext(parts[1])[0]
        if module not in allowed:
            continue  # reported above (or a stray file at the top of src/)
        for m in inc.finditer(open(path, encoding="utf-8", errors="replace").read()):
            dep, header = m.group(1), m.group(2)
            target = "%s/%s" % (dep, header)
            if dep == module:
                continue
            ok = allowed[module] is None or dep in allowed[module]
            why = "module %s may not include %s (docs/architecture.md)" % (module, dep)
            if ok and re.search(r"_int\.h$", header):
                ok, why = False, "%s is private to src/%s/" % (target, dep)
            if ok:
                continue
            if (rel, target) in exceptions:
                exceptions[(rel, target)] = True
                continue
            line = m.string.count("\n", 0, m.start()) + 1
            problems.append("%s:%d: includes %s: %s" % (rel, line, target, why))

for (f, t), seen in exceptions.items():
    if not seen:
        problems.append("docs/architecture.md: exception %s -> %s no longer occurs; remove it" % (f, t))

for p in problems:
    print(p)
if problems:
    print("check-layering: %d problem(s)" % len(problems))
    sys.exit(1)
print("check-layering: %d modules, includes follow docs/architecture.md" % len(allowed))
