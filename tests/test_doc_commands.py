"""Every tool the docs name exists, and every tool they show as a command runs as shown.

Read: README.md and docs/*.md. A path tools/NAME.py|sh anywhere must be a file of the
repository. One shown as a command, at the start of a line of a fenced block (after a `$ `
prompt and VAR=value assignments) or of an inline code span, must be executable with a `#!` line
whose interpreter resolves (`/usr/bin/env X`: X on the PATH), and a Python tool must compile:
`tools/X.py ...` typed as the docs show it then starts, where a missing run bit gives
"Permission denied" (exit 126). tools/common.py is the tools' shared module, not a command.

usage: test_doc_commands.py SOURCE_ROOT
"""
import glob
import os
import re
import shutil
import sys

import checks
from checks import expect

root = os.path.abspath(sys.argv[1])
MODULES = {"tools/common.py"}
PATH = r"tools/[\w.-]+\.(?:py|sh)\b"
named, commands = {}, {}  # path -> the first doc that names it / shows it as a command
docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
for doc in docs:
    where = os.path.relpath(doc, root)
    text = open(doc, encoding="utf-8").read()
    for m in re.finditer(r"(?<![\w/.-])" + PATH, text):
        named.setdefault(m.group(0), where)
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        starts = []
        if fenced:
            starts.append(line)
        starts += re.findall(r"`([^`]+)`", line) if not fenced else []
        for s in starts:
            s = re.sub(r"^\s*(\$\s+)?((\w+=\S*)\s+)*", "", s)
            m = re.match(PATH, s)
            if m and m.group(0) not in MODULES:
                commands.setdefault(m.group(0), where)

expect(f"the docs name {len(named)} tools, {len(commands)} of them as commands", len(commands) > 10,
       sorted(commands))
for path, where in sorted(named.items()):
    expect(f"{path} (named in {where}) exists", os.path.isfile(os.path.join(root, path)))
for path, where in sorted(commands.items()):
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        continue
    first = open(full, "rb").readline().decode(errors="replace").strip()
    interpreter = first[2:].split() if first.startswith("#!") else []
    if interpreter[:1] == ["/usr/bin/env"]:
        found = shutil.which(interpreter[1]) if len(interpreter) > 1 else None
    else:
        found = interpreter[0] if interpreter and os.access(interpreter[0], os.X_OK) else None
    compiled = True
    if path.endswith(".py"):
        try:
            compile(open(full, encoding="utf-8").read(), full, "exec")
        except SyntaxError as e:
            compiled = e
    expect(f"{path} (a command in {where}) runs as shown: run bit, '{first[:40]}' resolving ({found}), compiles",
           os.access(full, os.X_OK) and found and compiled is True, compiled)
sys.exit(checks.exit_status())
