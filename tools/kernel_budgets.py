#!/usr/bin/env python3
"""Register, stack, shared-memory and SASS-instruction budgets of the CUDA kernels (sm_90).

Reads the sm_90 code that meson built into libkernels_cuda.a (no second compile) with
cuobjdump: `-res-usage` gives each kernel's registers, stack frame and static shared memory,
`-sass` its instructions. The budgets are kernels/cuda/budgets.tsv, one row per kernel.

  tools/kernel_budgets.py show   [LIB]   print the current numbers as the table would hold them
  tools/kernel_budgets.py check  [LIB]   compare with the table; exit 1 naming each kernel over
  tools/kernel_budgets.py update [LIB]   rewrite the table from the current numbers
  tools/kernel_budgets.py loops NAME [LIB]   instructions per loop body of the kernels whose
                                          name contains NAME (backward branch to its target)
  tools/kernel_budgets.py header OUT      the table's SASS and loop columns as a C header (the
                                          build makes it for `bench model`'s roofline model,
                                          which so costs each kernel at the counts the budget holds)

LIB defaults to build/kernels/libkernels_cuda.a. `--table FILE` names another table;
`check --current FILE` compares FILE (a `show` output) instead of measuring LIB. A kernel
fails when its registers, stack bytes, local-store bytes or shared bytes exceed the table's, or
its SASS count or a loop body's exceeds the table's by more than SASS_MARGIN; a kernel missing from the table
(or a row whose kernel is gone) fails too. Exit 77 with `SKIP: why` when cuobjdump is not found
or the library holds no sm_90 code.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, 'kernels', 'cuda', 'budgets.tsv')
ARCH = 'sm_90'
# SASS counts may exceed the budget by 2% (at least 2 instructions): scheduling noise between
# equivalent builds, not a change in the work per element. Registers, stack, local stores and
# shared memory have no margin.
SASS_MARGIN = 0.02
COLUMNS = ['regs', 'stack', 'stl_bytes', 'shared', 'sass', 'loop1', 'loop2']
COUNTED = ('sass', 'loop1', 'loop2')  # instruction counts: the 2% margin applies
HEADER = """\
# Resource and instruction budgets of every CUDA kernel for sm_90, read from meson's build of
# libkernels_cuda.a by tools/kernel_budgets.py (test: kernel_budgets; docs/CUDA.md, "Kernel
# budgets"). Columns: registers per thread; stack frame bytes; bytes of local-memory stores in
# the code (ptxas's spill stores plus any local arrays: non-zero means spills); static shared
# memory bytes as cuobjdump counts them (ptxas -v's figure plus 1 KiB where a kernel has any);
# SASS instructions (NOPs not counted; the check allows +2%); the SASS instructions of the
# kernel's largest and second-largest loop bodies (a backward branch back to its target, both
# included; 0 where it has fewer loops; +2% too): `bench model` costs the fused attention's
# tiles at these counts.
# A change to a kernel regenerates this table (`tools/kernel_budgets.py update`) in the same
# commit, and the commit message gives the hardware timing that justified the new numbers (or
# says the change is untimed and why the numbers went up).
"""


def skip(why):
    print('SKIP: ' + why)
    sys.exit(77)


def find_tool(name):
    """$NAME (upper case), PATH, the toolkit, then PyPI's nvidia-cuda-NAME (tools/requirements.txt)."""
    if os.environ.get(name.upper()):
        return os.environ[name.upper()]
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob('/usr/local/cuda*/bin/' + name))
    for base in sys.path + glob.glob(os.path.join(ROOT, '.venv', 'lib', 'python*', 'site-packages')):
        candidates += sorted(glob.glob(os.path.join(base, 'nvidia', '*', 'bin', name)))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None


def find_cuobjdump():
    """cuobjdump, with the nvdisasm that its -sass runs made findable (NVDISASM_PATH)."""
    cuobjdump, nvdisasm = find_tool('cuobjdump'), find_tool('nvdisasm')
    if not cuobjdump or not nvdisasm:
        return None
    os.environ['NVDISASM_PATH'] = os.path.dirname(nvdisasm)
    return cuobjdump


def nvcc_version():
    nvcc = shutil.which('nvcc') or '/usr/local/cuda/bin/nvcc'
    try:
        out = subprocess.run([nvcc, '--version'], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    m = re.search(r'release [\d.]+, V([\d.]+)', out)
    return m.group(1) if m else 'unknown'


def kernel_name(mangled, demangled):
    """`void ns::kernel<args>(params)` -> `kernel<args>` (the namespace and parameters dropped)."""
    name = demangled
    if name.endswith(')'):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {')': 1, '(': -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    name = re.sub(r'^void ', '', name)
    name = re.sub(r'^[A-Za-z_]\w*::', '', name)
    return name if name else mangled


def demangle(names):
    if not names:
        return {}
    try:
        out = subprocess.run(['c++filt'], input='\n'.join(names) + '\n', capture_output=True, text=True,
                             check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = names
    return {m: kernel_name(m, d) for m, d in zip(names, out)}


def local_store_bytes(opcode):
    """Bytes one STL instruction stores (STL, STL.64, STL.128, STL.U8 ...); 0 for others."""
    parts = opcode.split('.')
    if parts[0] != 'STL':
        return 0
    size = 4
    for p in parts[1:]:
        size = {'64': 8, '128': 16, 'U8': 1, 'S8': 1, 'U16': 2, 'S16': 2}.get(p, size)
    return size


def cubins(cuobjdump, lib, tmp):
    """The sm_90 cubins in lib: an object, a (thin) archive of objects, or a cubin."""
    with open(lib, 'rb') as f:
        magic = f.read(8)
    if magic in (b'!<thin>\n', b'!<arch>\n'):
        # a thin archive's member paths, as `ar t` prints them, are relative to its working directory
        lib_dir = os.path.dirname(os.path.abspath(lib))
        members = subprocess.run(['ar', 't', os.path.basename(lib)], cwd=lib_dir, capture_output=True, text=True,
                                 check=True).stdout.split()
        if magic == b'!<arch>\n':
            subprocess.run(['ar', 'x', os.path.abspath(lib)], cwd=tmp, check=True)
            base = tmp
        else:
            base = lib_dir
        objects = [os.path.join(base, m) for m in members]
    else:
        objects = [os.path.abspath(lib)]
    out = []
    for i, obj in enumerate(objects):
        if obj.endswith('.cubin'):
            out.append(obj)
            continue
        where = os.path.join(tmp, 'elf%d' % i)
        os.mkdir(where)
        r = subprocess.run([cuobjdump, '-arch', ARCH, '-xelf', 'all', obj], cwd=where, capture_output=True, text=True)
        if r.returncode != 0 and 'does not contain' not in r.stderr:
            sys.exit('%s -xelf all %s failed: %s' % (cuobjdump, obj, r.stderr.strip()))
        out += sorted(glob.glob(os.path.join(where, '*.cubin')))
    return out


def measure(cuobjdump, lib):
    """{kernel: {column: value}} for the sm_90 code in lib."""
    with tempfile.TemporaryDirectory() as tmp:
        files = cubins(cuobjdump, lib, tmp)
        text = {}
        for flag in ('-res-usage', '-sass'):
            text[flag] = ''
            for cubin in files:
                r = subprocess.run([cuobjdump, flag, cubin], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit('%s %s %s failed: %s' % (cuobjdump, flag, cubin, r.stderr.strip()))
                text[flag] += r.stdout
    stats = {}
    current = None
    for line in text['-res-usage'].splitlines():
        m = re.match(r'\s*Function (\S+):$', line)
        if m:
            current = stats.setdefault(m.group(1), dict.fromkeys(COLUMNS, 0))
            continue
        m = re.match(r'\s*REG:(\d+) STACK:(\d+) SHARED:(\d+)', line)
        if m and current is not None:
            current.update(regs=int(m.group(1)), stack=int(m.group(2)), shared=int(m.group(3)))
            current = None
    current = None
    for line in text['-sass'].splitlines():
        m = re.match(r'\s*Function : (\S+)$', line)
        if m:
            current = stats.setdefault(m.group(1), dict.fromkeys(COLUMNS, 0))
            continue
        m = re.match(r'\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)', line)
        if m and current is not None and m.group(1) != 'NOP':
            current['sass'] += 1
            current['stl_bytes'] += local_store_bytes(m.group(1))
    for function in re.split(r'\n\s*Function : ', text['-sass'])[1:]:
        sizes = sorted((len(body) for _, _, body in loop_bodies(function)), reverse=True) + [0, 0]
        row = stats[function.split('\n', 1)[0].strip()]
        row['loop1'], row['loop2'] = sizes[0], sizes[1]
    names = demangle(sorted(stats))
    out = {}
    for mangled, row in stats.items():
        name = names[mangled]
        if name in out:
            sys.exit('two kernels read as %s: %s' % (name, mangled))
        out[name] = row
    return out


def loop_bodies(text):
    """The loops of one function's SASS: (target, branch address, opcodes without NOPs) for each
    backward branch, from its target to the branch, both included."""
    code = [(int(m.group(1), 16), m.group(2)) for m in
            re.finditer(r'/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([^;]*);', text)]
    out = []
    for addr, ins in code:
        m = re.match(r'BRA\b.*?(0x[0-9a-f]+)', ins)
        if not m or int(m.group(1), 16) >= addr:
            continue
        body = [i.split()[0].split('.')[0] for a, i in code if int(m.group(1), 16) <= a <= addr]
        out.append((int(m.group(1), 16), addr, [op for op in body if op != 'NOP']))
    return out


def loops(cuobjdump, lib, pattern):
    sass = ''
    with tempfile.TemporaryDirectory() as tmp:
        for cubin in cubins(cuobjdump, lib, tmp):
            sass += subprocess.run([cuobjdump, '-sass', cubin], capture_output=True, text=True, check=True).stdout
    functions = re.split(r'\n\s*Function : ', sass)[1:]
    names = demangle([f.split('\n', 1)[0].strip() for f in functions])
    for text in functions:
        name = names[text.split('\n', 1)[0].strip()]
        if pattern not in name:
            continue
        for target, addr, body in loop_bodies(text):
            counts = sorted({op: body.count(op) for op in body}.items(), key=lambda kv: (-kv[1], kv[0]))
            print('%s\t[%#x, %#x]\t%d\t%s' % (name, target, addr, len(body),
                                              ' '.join('%s:%d' % kv for kv in counts[:8])))


def read_table(path):
    table = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip('\n')
            if not line or line.startswith('#'):
                continue
            fields = line.split('\t')
            if fields[0] == 'kernel':
                if fields[1:] != COLUMNS:
                    sys.exit('%s:%d: columns %s, expected %s' % (path, lineno, fields[1:], COLUMNS))
                continue
            if len(fields) != len(COLUMNS) + 1 or not all(x.isdigit() for x in fields[1:]):
                sys.exit('%s:%d: expected a kernel name and %d whole numbers, got %r' %
                         (path, lineno, len(COLUMNS), line))
            table[fields[0]] = dict(zip(COLUMNS, map(int, fields[1:])))
    return table


def write_header(table, path, out):
    rows = ['    {"%s", %d, %d, %d},' % (name, table[name]['sass'], table[name]['loop1'], table[name]['loop2'])
            for name in sorted(table)]
    text = ('// Made from %s by tools/kernel_budgets.py header: each CUDA kernel\'s\n'
            '// budgeted sm_90 SASS instructions, whole and of its two largest loop bodies (the test\n'
            '// kernel_budgets holds the build to them).\n'
            '#pragma once\nstatic const struct {\n    const char *kernel;\n    int sass, loop1, loop2;\n'
            '} sass_budgets[] = {\n' % os.path.relpath(path, ROOT)) + '\n'.join(rows) + '\n};\n'
    with open(out, 'w') as f:
        f.write(text)
    return 0


def format_table(stats):
    lines = [HEADER.rstrip('\n'), '# nvcc ' + nvcc_version(), '\t'.join(['kernel'] + COLUMNS)]
    for name in sorted(stats):
        lines.append('\t'.join([name] + [str(stats[name][c]) for c in COLUMNS]))
    return '\n'.join(lines) + '\n'


def check(stats, table, path):
    failures = []
    for name in sorted(stats):
        if name not in table:
            failures.append('%s: no budget in %s' % (name, path))
            continue
        have, budget = stats[name], table[name]
        for c in COLUMNS:
            limit = budget[c]
            if c in COUNTED:
                limit = budget[c] + max(2, int(budget[c] * SASS_MARGIN))
            if have[c] > limit:
                failures.append('%s: %s %d > budget %d%s' % (name, c, have[c], budget[c],
                                                            ' (+2%% allowed: %d)' % limit if c in COUNTED else ''))
    for name in sorted(set(table) - set(stats)):
        failures.append('%s: in %s but not in the build' % (name, path))
    return failures


def main(argv):
    args = list(argv)
    path = TABLE
    current = None
    for opt in ('--table', '--current'):
        if opt in args:
            i = args.index(opt)
            if i + 1 >= len(args):
                sys.exit('%s needs a file' % opt)
            if opt == '--table':
                path = args[i + 1]
            else:
                current = args[i + 1]
            del args[i:i + 2]
    if not args or args[0] not in ('show', 'check', 'update', 'loops', 'header') or \
            (args[0] in ('loops', 'header') and len(args) < 2):
        sys.exit(__doc__)
    cmd = args.pop(0)
    if cmd == 'header':
        return write_header(read_table(path), path, args[0])
    pattern = args.pop(0) if cmd == 'loops' else None
    lib = args[0] if args else os.path.join(ROOT, 'build', 'kernels', 'libkernels_cuda.a')
    if cmd == 'check' and current:
        return report(read_table(current), path)
    if not os.path.exists(lib):
        skip('%s not built (nvcc not found at configure time?)' % lib)
    cuobjdump = find_cuobjdump()
    if not cuobjdump:
        skip('cuobjdump or nvdisasm not found (CUDA toolkit, or pip install nvidia-cuda-cuobjdump and '
             'nvidia-cuda-nvdisasm from tools/requirements.txt)')
    if cmd == 'loops':
        loops(cuobjdump, lib, pattern)
        return 0
    stats = measure(cuobjdump, lib)
    if not stats:
        skip('%s holds no %s code (gpu_archs must include 90)' % (lib, ARCH))
    if cmd == 'show':
        sys.stdout.write(format_table(stats))
        return 0
    if cmd == 'update':
        with open(path, 'w') as f:
            f.write(format_table(stats))
        print('%s: %d kernels' % (path, len(stats)))
        return 0
    return report(stats, path)


def report(stats, path):
    if not os.path.exists(path):
        sys.exit('%s: no such table (tools/kernel_budgets.py update writes it)' % path)
    failures = check(stats, read_table(path), path)
    for line in failures:
        print('FAIL: ' + line)
    if failures:
        with open(path) as f:
            made = re.search(r'^# nvcc (\S+)$', f.read(), re.M)
        here = nvcc_version()
        print('%d of %d kernels over budget or unlisted; if the change is meant, run tools/kernel_budgets.py '
              'update and give the hardware timing in the commit message' % (len(failures), len(stats)))
        if made and made.group(1) != here:
            print('note: the table was made with nvcc %s, this build with nvcc %s: another release schedules '
                  'differently; regenerate the table for it' % (made.group(1), here))
        return 1
    print('%d kernels within their budgets in %s' % (len(stats), path))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
