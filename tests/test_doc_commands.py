"""Every tool the docs name exists, every tool they show as a command runs as shown, and
every link between the docs leads somewhere.

Read: README.md and docs/*.md. A path tools/NAME.py|sh anywhere must be a file of the
repository. One shown as a command, at the start of a line of a fenced block (after a `$ `
prompt and VAR=value assignments) or of an inline code span, must be executable with a `#!` line
whose interpreter resolves (`/usr/bin/env X`: X on the PATH), and a Python tool must compile:
`tools/X.py ...` typed as the docs show it then starts, where a missing run bit gives
"Permission denied" (exit 126). tools/common.py is the tools' shared module, not a command.
Links: every relative link [..](PATH#ANCHOR) of those files names a file or folder that exists,
and an anchor in a Markdown file is one of its headings as GitHub writes them (lower case,
punctuation left out, spaces as hyphens, a repeated heading -1, -2, ...).

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


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown file."""
    seen, found, fenced = {}, set(), False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = re.match(r"#{1,6} +(.*?)\s*$", line)
        if m and not fenced:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


links = bad = 0
for doc in docs:
    text = re.sub(r"```.*?```", "", open(doc, encoding="utf-8").read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        links += 1
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        where = f"{os.path.relpath(doc, root)}: ({target})"
        if not os.path.exists(full):
            bad += 1
            expect(f"{where}: {os.path.relpath(full, root)} exists", False)
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            bad += 1
            expect(f"{where}: a heading of {os.path.relpath(full, root)} gives #{anchor}", False,
                   sorted(anchors(full))[:40])
expect(f"{links} links between the docs, {bad} leading nowhere", links > 50 and bad == 0)
sys.exit(checks.exit_status())
