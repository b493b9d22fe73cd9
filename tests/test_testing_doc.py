"""docs/TESTING.md lists every test there is, and only those.

The tests: meson's own list of this build (BUILD/meson-info/intro-tests.json, written when the
build is configured). The doc: the first cell of each row of its tables, its code spans, where
one span may name several tests: `a_{x,y}` (each of x, y), `a_*` (a pattern), and `_z` after
`a_b_c` (a_b_z: the earlier name with its last part replaced); "(suite `gpu`)" names a suite.
Every test must be named by a row, and every name of a row must be a test.

usage: test_testing_doc.py SOURCE_ROOT BUILD_ROOT
"""
import fnmatch
import json
import os
import re
import sys

import checks
from checks import expect

source, build = sys.argv[1], sys.argv[2]
with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
    tests = sorted({t["name"] for t in json.load(f)})


def expand(span, previous):
    """The names (or patterns) one code span gives."""
    if span.startswith("_") and previous:
        span = previous.rsplit("_", 1)[0] + span
    m = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", span)
    if m:
        return [m.group(1) + part + m.group(3) for part in m.group(2).split(",")]
    return [span]


named = []  # (pattern, line number)
with open(os.path.join(source, "docs", "TESTING.md"), encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
        if not line.startswith("| `"):
            continue
        previous = None
        cell = re.sub(r"\(suite `\w+`\)", "", line.split("|")[1])  # a suite's name, not a test's
        for span in re.findall(r"`([^`]+)`", cell):
            for name in expand(span, previous):
                named.append((name, n))
            previous = span if not span.startswith("_") else previous

expect(f"meson lists {len(tests)} tests; TESTING.md's rows name {len(named)} tests or patterns",
       len(tests) > 100 and named)
unlisted = [t for t in tests if not any(fnmatch.fnmatchcase(t, p) for p, _ in named)]
expect(f"every test is named in TESTING.md ({len(unlisted)} not)", not unlisted, unlisted)
stale = [f"line {n}: {p}" for p, n in named if not any(fnmatch.fnmatchcase(t, p) for t in tests)]
expect(f"every name in TESTING.md's rows is a test ({len(stale)} not)", not stale, stale)
sys.exit(checks.exit_status())
