"""The layering of docs/ARCHITECTURE.md §3, read from the code and the build:
  - every `#include "FOLDER/..."` of the sources (tests aside) goes down the order
    cli/tools > engine > data > tokenizer > kernels > kernels/common, or stays in its floor;
  - no two source files call each other, directly or round a longer loop: the calls are read
    from the compiled objects of bertpre (`nm`: a file calls another when it uses a symbol
    that only the other defines; the emulation's wrappers count as the .cu they compile);
  - each library's meson.build links the libraries of the floors its code includes (the
    kernel backends aside: an executable picks cpu, cpu64, cuda or the emulation).
Each finding names the file and line, or the symbol, that makes it.

usage: test_layers.py SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import re
import shutil
import subprocess
import sys

import checks
from checks import expect

root, build = sys.argv[1], sys.argv[2]
# Floors from the top; a file belongs to the first folder its path starts with.
FLOORS = [("cli", 5), ("tools", 5), ("engine", 4), ("data", 3), ("tokenizer", 2), ("kernels/common", 0),
          ("kernels", 1)]
LIBRARY = {"kernels/common": "common_lib", "tokenizer": "tokenizer_libs", "data": "data_lib", "engine": "engine_lib"}
SOURCE = re.compile(r"\.(c|h|cc|cpp|cu|cuh|in)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"')


def floor(path):
    for folder, level in sorted(FLOORS, key=lambda f: -len(f[0])):
        if path.startswith(folder + "/"):
            return folder, level
    return None, None


files = []
for folder in ("cli", "tools", "engine", "data", "tokenizer", "kernels"):
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names if SOURCE.search(n)]
files.sort()
includes = []  # (file, line number, included path)
for path in files:
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                includes.append((path, number, m.group(1)))
expect(f"the sources are found and read ({len(files)} files, {len(includes)} includes of the tree)",
       len(files) > 100 and len(includes) > 200, root)

# 1. Down the floors, never up.
upward = []
for path, number, target in includes:
    (here, level), (there, other) = floor(path), floor(target)
    if there is None:
        upward.append(f"{path}:{number}: includes {target}, which is in no floor of the order")
    elif other > level:
        upward.append(f"{path}:{number}: includes {target} ({there}, above {here})")
expect("no include goes up the order cli/tools > engine > data > tokenizer > kernels > kernels/common",
       not upward, "\n".join(upward))

# 2. No two files call each other: the call graph of bertpre's objects, from compile_commands.json
# (object -> source) and nm (symbols defined and used).
commands = []
if not shutil.which("nm") or not os.path.exists(os.path.join(build, "compile_commands.json")):
    print(f"SKIP (the calls): reading them needs nm (binutils) and {build}/compile_commands.json")
else:
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
objects = {}  # object path -> source path relative to the root
for c in commands:
    out, src = c["output"], c["file"]
    if not re.match(r"(kernels|tokenizer|data|engine)/lib\w+\.a\.p/|bertpre\.p/", out) or "cpu64" in out:
        continue
    src = os.path.relpath(os.path.normpath(os.path.join(c["directory"], src)), root)
    wrapped = re.search(r"(?:^|/)emu_(\w+)\.cpp$", src)
    if wrapped and not src.startswith("kernels/"):  # the emulation's wrapper of a .cu
        src = f"kernels/cuda/{wrapped.group(1)}.cu"
    objects[os.path.join(c["directory"], out)] = src
defined, used = {}, {}
for obj, src in sorted(objects.items()):
    if not os.path.exists(obj):
        continue
    nm = subprocess.run(["nm", "-P", "-C", obj], capture_output=True, text=True)
    for line in nm.stdout.splitlines():
        m = re.match(r"(.+?) ([A-Za-z])( +[0-9a-f]*)*$", line)
        if not m:
            continue
        name, kind = m.group(1), m.group(2)
        if kind in "TDBRC":
            defined.setdefault(name, set()).add(src)
        elif kind == "U":
            used.setdefault(src, set()).add(name)
if commands:
    expect(f"bertpre's objects are read ({len(objects)} objects, {len(defined)} symbols defined)",
           len(objects) > 50 and len(defined) > 300, build)
edges = {}
for src, names in used.items():
    for name in sorted(names):
        owners = defined.get(name, set())
        if len(owners) == 1 and src not in owners:
            edges.setdefault(src, {}).setdefault(next(iter(owners)), name)
cycles, state = [], {}


def visit(node, stack):
    state[node] = 1
    stack.append(node)
    for nxt in sorted(edges.get(node, {})):
        if state.get(nxt) == 1:
            loop = stack[stack.index(nxt):] + [nxt]
            cycles.append(" -> ".join(f"{a} (calls {edges[a][b]})" for a, b in zip(loop, loop[1:])) + f" -> {nxt}")
        elif not state.get(nxt):
            visit(nxt, stack)
    stack.pop()
    state[node] = 2


for node in sorted(edges):
    if not state.get(node):
        visit(node, [])
if commands:
    expect(f"no two files call each other ({sum(map(len, edges.values()))} calling pairs, no loop)", not cycles,
           "\n".join(cycles))

# 3. The build states the graph: each library links the libraries of the floors it includes.
for folder, lib in LIBRARY.items():
    build = os.path.join(root, folder, "meson.build") if folder != "kernels/common" else None
    if not build:
        continue
    with open(build) as f:
        text = f.read()
    m = re.search(r"static_library\(.*?link_with:\s*(.*?)(?:,\s*\w+\s*:|\)\s*$)", text, re.S | re.M)
    linked = set(re.findall(r"\w+", m.group(1))) if m else set()
    needed = sorted({LIBRARY[floor(t)[0]] for p, _, t in includes if floor(p)[0] == folder and
                     floor(t)[0] in LIBRARY and floor(t)[0] != folder})
    expect(f"{folder}/meson.build links what {folder}/ includes ({', '.join(needed) or 'nothing'})",
           set(needed) <= linked, f"link_with: {sorted(linked)}")
sys.exit(checks.exit_status())
