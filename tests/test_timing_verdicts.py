"""No test decides its verdict by a time, a rate or a CPU figure that it measured
(docs/TESTING.md, "The same verdict every run").

Every Python test under tests/ is read as a syntax tree. A value is a measurement when it
comes from the test's own clocks or CPU accounting: time.time, time.monotonic,
time.perf_counter, time.process_time, time.thread_time (and their _ns forms),
resource.getrusage, os.times; and so is anything computed from one: a name assigned from it,
a list it was appended to, a function that returns it, and so on, followed to a fixed
point in each scope. A verdict is the condition of an `expect(...)` (any function or method
of that name), of an `assert`, or of an `if` whose body exits non-zero, raises or records a
failure. The test fails where a verdict orders a measurement against anything (<, <=, >,
>=), directly or through a name that holds such a comparison. Waits are allowed: a loop that
polls until a deadline (a hang guard) decides nothing, and a verdict may say "it never
happened" once the wait ends; a measured time may be printed in a message. The C and C++
tests are read line by line for the same pattern: a variable assigned from clock_gettime,
clock(), time() or a now_*() helper, ordered against something inside expect(...).

The checker first runs on its own examples: each known bad pattern (among them the CPU-time
ratio that tests/test_blas_threads.py used to assert, and the wall-time bounds that
test_guards, test_checkpoint and test_nccl used to) must be flagged, and each allowed one
(a wait loop, a hang guard answering `is None`, a time in a message) must not.

usage: test_timing_verdicts.py TESTS_DIR
"""
import ast
import os
import re
import sys

import checks
from checks import expect

CLOCKS = {"time", "monotonic", "perf_counter", "process_time", "thread_time", "time_ns", "monotonic_ns",
          "perf_counter_ns", "process_time_ns", "thread_time_ns", "getrusage", "times"}
CLOCK_MODULES = {"time", "resource", "os"}
ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def is_clock_call(node):
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f.value.id in CLOCK_MODULES and f.attr in CLOCKS and not (f.value.id == "os" and f.attr == "time")
    return isinstance(f, ast.Name) and f.id in CLOCKS - {"time", "times"}  # from time import perf_counter


class Scope:
    def __init__(self, node, parent):
        self.node, self.parent = node, parent
        self.measured, self.verdicts = set(), set()  # names holding a measurement / a timed comparison

    def has(self, name, attr):
        s = self
        while s:
            if name in getattr(s, attr):
                return True
            s = s.parent
        return False


def own_nodes(node):
    """The nodes of a scope's body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


class Checker:
    def __init__(self, tree):
        self.tree = tree
        self.scopes = []
        self.timed_functions = set()  # functions that return a measurement
        self._collect(tree, None)

    def _collect(self, node, parent):
        scope = Scope(node, parent)
        self.scopes.append(scope)
        for n in own_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._collect(n, scope)

    def measured(self, node, scope):
        for n in ast.walk(node):
            if is_clock_call(n):
                return True
            if isinstance(n, ast.Name) and scope.has(n.id, "measured"):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in self.timed_functions:
                return True
            if isinstance(n, ast.Attribute) and n.attr in ("ru_utime", "ru_stime"):
                return True
        return False

    def timed_comparison(self, node, scope):
        """node contains an ordering of a measurement, or a name that holds one."""
        for n in ast.walk(node):
            if isinstance(n, ast.Compare) and any(isinstance(op, ORDER) for op in n.ops):
                if any(self.measured(x, scope) for x in [n.left, *n.comparators]):
                    return True
            if isinstance(n, ast.Name) and scope.has(n.id, "verdicts"):
                return True
        return False

    @staticmethod
    def targets(t):
        if isinstance(t, ast.Name):
            return [t.id]
        if isinstance(t, (ast.Tuple, ast.List)):
            return [n for e in t.elts for n in Checker.targets(e)]
        if isinstance(t, (ast.Subscript, ast.Attribute)):
            base = t.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            return [base.id] if isinstance(base, ast.Name) else []
        if isinstance(t, ast.Starred):
            return Checker.targets(t.value)
        return []

    def assignments(self, scope):
        """(target names, value) pairs of the scope, tuples split element by element."""
        for n in own_nodes(scope.node):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple) and len(t.elts) == len(n.value.elts):
                        for te, ve in zip(t.elts, n.value.elts):
                            yield self.targets(te), ve
                    else:
                        yield self.targets(t), n.value
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                yield self.targets(n.target), n.value
            elif isinstance(n, ast.NamedExpr):
                yield self.targets(n.target), n.value
            elif isinstance(n, (ast.For, ast.comprehension)):
                yield self.targets(n.target), n.iter
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                yield self.targets(n.optional_vars), n.context_expr
            elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and
                  n.func.attr in ("append", "extend", "add", "insert", "update", "setdefault")):
                for a in n.args:
                    yield self.targets(n.func.value), a

    def propagate(self):
        changed = True
        while changed:
            changed = False
            for scope in self.scopes:
                for names, value in self.assignments(scope):
                    for attr, test in (("measured", self.measured), ("verdicts", self.timed_comparison)):
                        if test(value, scope):
                            for name in names:
                                if name not in getattr(scope, attr):
                                    getattr(scope, attr).add(name)
                                    changed = True
                node = scope.node
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in self.timed_functions:
                    if any(isinstance(n, ast.Return) and n.value is not None and self.measured(n.value, scope)
                           for n in own_nodes(node)):
                        self.timed_functions.add(node.name)
                        changed = True

    @staticmethod
    def fails(body):
        """An if-body that decides a failure: sys.exit/exit with anything but 0 or 77, raise,
        or expect(..., False)."""
        for n in (x for stmt in body for x in ast.walk(stmt)):
            if isinstance(n, ast.Raise):
                return True
            if isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name == "exit" and not (n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value in (0, 77)):
                    return True
                if name == "expect" and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and not n.args[1].value:
                    return True
        return False

    def findings(self):
        self.propagate()
        out = []
        for scope in self.scopes:
            for n in own_nodes(scope.node):
                cond = None
                if isinstance(n, ast.Call):
                    f = n.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                    if name == "expect":
                        cond = n.args[1] if len(n.args) > 1 else next((k.value for k in n.keywords if k.arg == "ok"), None)
                elif isinstance(n, ast.Assert):
                    cond = n.test
                elif isinstance(n, ast.If) and self.fails(n.body):
                    cond = n.test
                if cond is not None and self.timed_comparison(cond, scope):
                    out.append((n.lineno, ast.unparse(cond)[:160]))
        return sorted(set(out))


def python_findings(source, name="<example>"):
    return Checker(ast.parse(source, name)).findings()


C_CLOCK = re.compile(r"\b(clock_gettime|clock|time|now_\w*)\s*\(")
C_ASSIGN = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\+|-)?=[^=]")


def c_findings(source):
    """Lines of C/C++ where expect(...) orders a variable computed from a clock."""
    timed, out = set(), []
    lines = source.splitlines()
    for _ in range(3):  # a few rounds reach names computed from names computed from a clock
        for line in lines:
            m = C_ASSIGN.search(line)
            if m and (C_CLOCK.search(line[m.end():]) or any(re.search(rf"\b{t}\b", line[m.end():]) for t in timed)):
                timed.add(m.group(1))
    for i, line in enumerate(lines, 1):
        if re.search(r"\bexpect\s*\(", line) and re.search(r"[<>]=?", line.split("expect", 1)[1]):
            if any(re.search(rf"\b{t}\b", line) for t in timed) or C_CLOCK.search(line.split("expect", 1)[1]):
                out.append((i, line.strip()[:160]))
    return out


# The checker's own examples: (what, source, flagged?)
PY_EXAMPLES = [
    ("the old blas_threads verdict: a ratio of two least CPU times (getrusage) under 1.10", """
import resource
def cpu_seconds(extra):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run(extra)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
direct, scripted = [], []
for _ in range(2):
    direct.append(cpu_seconds({}))
    scripted.append(cpu_seconds({"OPENBLAS_NUM_THREADS": "1"}))
ratio = min(direct) / min(scripted)
expect("run directly at most 1.10 times", ratio <= 1.10)
""", True),
    ("a wall time bound through a tuple and a flag (the old guards dry run)", """
started = time.time()
seconds, ok, detail = time.time() - started, p.returncode == 0, p.stderr
expect("answered in under 20 s", ok and seconds < 20, detail)
""", True),
    ("a time against another measured time (the old eval SIGINT)", """
start = time.time(); out = p.communicate(); took = time.time() - start
whole = (time.time() - start) * 10
expect("exit after at most half", p.returncode == 0 and took <= whole / 2)
""", True),
    ("a timed comparison kept in a name, then asserted", """
t0 = time.perf_counter(); work()
fast = time.perf_counter() - t0 < 3
assert fast, "too slow"
""", True),
    ("an if that exits on a CPU-time bound (os.times)", """
t = os.times()
if t.user > 10:
    sys.exit(1)
""", True),
    ("a method expect (data_fixtures' c.expect) on process_time", """
def f(c):
    t0 = time.process_time(); work()
    c.expect("quick", time.process_time() - t0 < 1.0)
""", True),
    ("a wait until a deadline (hang guard), then a verdict on what happened", """
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(path):
    time.sleep(0.1)
expect("the file appeared", os.path.exists(path))
""", False),
    ("a hang guard that returns None, judged with is None", """
def wait_unlocked(seconds):
    t0 = time.time()
    while True:
        if time.time() - t0 > seconds:
            return None
        return time.time() - t0
free = wait_unlocked(60)
expect(f"let go within the wait ({free})", free is not None)
""", False),
    ("a measured time printed in the message only", """
t0 = time.time(); p = run(); took = time.time() - t0
expect(f"exit 0 after {took:.1f} s", p.returncode == 0)
""", False),
    ("an ordering of the program's own reported clock (monotonic by construction)", """
elapsed = [r["elapsed_s"] for r in lines]
expect("elapsed increases", all(a < b for a, b in zip(elapsed, elapsed[1:])))
""", False),
]
C_EXAMPLES = [
    ("C: a clock difference ordered inside expect", """
double t0 = now_s();
work();
double took = now_s() - t0;
expect(took < 0.5, "fast enough");
""", True),
    ("C: a clock difference printed, the verdict on counts", """
double t0 = now_s();
work();
t_exact += now_s() - t0;
printf("%.0f ns per lookup\\n", t_exact);
expect(stats.queries == 12, "12 plans");
""", False),
]

for what, source, bad in PY_EXAMPLES:
    got = python_findings(source)
    expect(f"checker example, {'flagged' if bad else 'allowed'}: {what}", bool(got) == bad, got)
for what, source, bad in C_EXAMPLES:
    got = c_findings(source)
    expect(f"checker example, {'flagged' if bad else 'allowed'}: {what}", bool(got) == bad, got)

tests_dir = sys.argv[1]
names = sorted(n for n in os.listdir(tests_dir) if n.endswith((".py", ".c", ".cpp", ".h")))
found = []
for name in names:
    path = os.path.join(tests_dir, name)
    source = open(path, encoding="utf-8").read()
    hits = python_findings(source, path) if name.endswith(".py") else c_findings(source)
    found += [f"{name}:{line}: {text}" for line, text in hits]
expect(f"no verdict among {len(names)} test sources orders a measured time or CPU figure", not found,
       "\n".join(found))
sys.exit(checks.exit_status())
