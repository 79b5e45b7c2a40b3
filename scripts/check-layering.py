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

def sources(exts):
    """(path, path relative to the root) of every file under src/ ending in one of exts."""
    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith(exts):
                path = os.path.join(dirpath, f)
                yield path, os.path.relpath(path, root).replace(os.sep, "/")



def table(text, name, optional=False):
    m = re.search(r"<!-- %s:begin -->\n(.*?)<!-- %s:end -->" % (name, name), text, re.S)
    if not m and optional:
        return []
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
for path, rel in sources((".c", ".h")):
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

# Functions over MAX_FUNC lines (STYLE.md: files and functions with one job). A top-level
# definition runs from its signature's first line to the "}" in column 0 that closes it; braces in
# comments, strings and character literals do not count. Known offenders are listed, with the way
# out, in the long-functions table of docs/architecture.md; one that got short is an error too.
MAX_FUNC = 200
long_ok = {(c[0], c[1]): False for c in table(text, "long-functions", optional=True)}
strip = re.compile(r'//.*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')
for path, rel in sources((".c",)):
    depth, start, name, in_comment = 0, None, None, False
    head = []  # lines since the last top-level statement: the signature being read
    for no, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
        code = line
        if in_comment:
            if "*/" not in code:
                continue
            code, in_comment = code.split("*/", 1)[1], False
        code = strip.sub("", code)
        if "/*" in code:
            code, in_comment = code.split("/*", 1)[0], True
        if depth == 0:
            if code.strip().startswith("#") or not code.strip():
                head = []
                continue
            head.append((no, code))
        opens, closes = code.count("{"), code.count("}")
        if depth == 0 and opens > closes:
            sig = " ".join(c for _, c in head)
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", sig)
            if m and "=" not in sig.split("(")[0]:
                start, name = head[0][0], m.group(1)
        depth += opens - closes
        if depth == 0 and (opens or closes):
            if start is not None and no - start + 1 > MAX_FUNC:
                if (rel, name) in long_ok:
                    long_ok[(rel, name)] = True
                else:
                    problems.append("%s:%d: %s() is %d lines (over %d: split it)" % (
                        rel, start, name, no - start + 1, MAX_FUNC))
            start, name, head = None, None, []
        elif depth == 0 and code.rstrip().endswith(";"):
            head = []
for (f, n), seen in long_ok.items():
    if not seen:
        problems.append("docs/architecture.md: long function %s %s() is no longer over %d lines; "
                        "remove it from the table" % (f, n, MAX_FUNC))

# The environment is read in one place: the option table of src/cli/options.c (docs/env.md). A
# getenv or setenv anywhere else in src/ is an error unless listed here, each with why it must stay
# where it acts; a listed one that no longer occurs is an error too.
ENV_FILE = "src/cli/options.c"
ENV_EXCEPTIONS = {
    ("src/base/fault.c", "getenv", "CLLM_FAULT_ALLOC"):
        "read by the allocator wrappers on the first allocation, before main() parses anything",
    ("src/base/fault.c", "getenv", "CLLM_FAULT_TRACE"): "as CLLM_FAULT_ALLOC",
    ("src/base/fault.c", "getenv", "CLLM_FAULT_REPORT"): "as CLLM_FAULT_ALLOC",
    ("src/dist/dist_common.c", "getenv", "OMPI_COMM_WORLD_SIZE"):
        "set by the MPI launcher: whether this process is a rank, before argv is parsed",
    ("src/dist/dist_common.c", "getenv", "PMI_SIZE"): "as OMPI_COMM_WORLD_SIZE",
    ("src/dist/dist_common.c", "getenv", "PMIX_SIZE"): "as OMPI_COMM_WORLD_SIZE",
    ("src/dist/dist_common.c", "getenv", "PMIX_RANK"): "as OMPI_COMM_WORLD_SIZE",
    ("src/dist/dist_mpi.c", "getenv", "OMPI_COMM_WORLD_RANK"):
        "set by the MPI launcher: names the rank when MPI_Init fails",
    ("src/cli/cli_model.c", "getenv", "TMPDIR"):
        "the POSIX temporary folder (as mkstemp users read it), not a cllm option",
    ("src/dist/dist_mpi.c", "setenv", "OMPI_MCA_mpi_yield_when_idle"):
        "configures the MPI library itself (read by MPI_Init), not cllm",
}
env_seen = {k: False for k in ENV_EXCEPTIONS}
env_strip = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# a string literal (skipped whole: a "getenv(" inside one is no call) or a call, with its literal
env_call = re.compile(r'"(?:\\.|[^"\\\n])*"|\b(getenv|setenv|unsetenv|putenv|secure_getenv)\s*\('
                      r'\s*("([^"]*)")?')
for path, rel in sources((".c", ".h")):
    if rel == ENV_FILE:
        continue
    # comments out (their newlines kept, for line numbers), strings kept: getenv's argument
    code = env_strip.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else
                         "\n" * m.group(0).count("\n"),
                         open(path, encoding="utf-8", errors="replace").read())
    for m in env_call.finditer(code):
        if not m.group(1):
            continue
        key = (rel, m.group(1), m.group(3) or "?")
        if key in ENV_EXCEPTIONS:
            env_seen[key] = True
            continue
        line = code.count("\n", 0, m.start()) + 1
        problems.append("%s:%d: %s(%s): the environment is read only by the option table of "
                        "%s (docs/env.md)" % (rel, line, m.group(1), m.group(2) or "...",
                                              ENV_FILE))
for (f, fn, var), seen in env_seen.items():
    if not seen and os.path.exists(os.path.join(root, f)):
        problems.append("scripts/check-layering.py: exception %s %s(%s) no longer occurs; "
                        "remove it" % (f, fn, var))

for p in problems:
    print(p)
if problems:
    print("check-layering: %d problem(s)" % len(problems))
    sys.exit(1)
print("check-layering: %d modules, includes follow docs/architecture.md; no function over %d "
      "lines beyond the listed ones" % (len(allowed), MAX_FUNC))
