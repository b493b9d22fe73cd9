"""The launch ledger of the CUDA emulation held against the kernels' compiled limits.

The emulation runs a kernel with any block size and registers, since `__launch_bounds__` and
register allocation mean nothing on the host. With BERTPRE_EMU_LAUNCH_LEDGER=FILE it writes
each distinct launch shape (kernel, threads per block, dynamic shared memory, cluster, opt-in;
kernels/cuda/emu/scheduler.cpp). This test runs the op tests with the ledger on and checks
every launch against what a GPU (sm_90) would refuse:
- threads per block <= the kernel's __launch_bounds__ (read here from the sources);
- its registers (kernels/cuda/budgets.tsv, ptxas's count), allocated per warp in units of
  256, times the block's warps <= 65536;
- static shared memory (budgets.tsv, less the 1 KiB the table adds for the system) plus the
  dynamic <= 227 KB; dynamic above 48 KB only with an opt-in at least as large;
- every kernel of kernels/cuda that ran has a budgets.tsv row (its numbers are known).
Before trusting the pass, the check is shown refusing: `test_cuda_emu launch-bounds` launches
a __launch_bounds__(128) kernel with 256 threads; a ledger line given more dynamic shared
memory than fits, and a budget given more registers than a block holds, are refused naming
the kernel and the rule.

usage: test_launch_ledger.py TEST_CUDA_EMU TEST_CUDA_OPS_EMU SOURCE_ROOT
"""
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

REGISTERS_PER_BLOCK = 65536
SHARED_PER_BLOCK = 227 * 1024  # sm_90's opt-in maximum, static + dynamic
SHARED_DEFAULT = 48 * 1024


def base_name(name):
    """A kernel's name without its template arguments and namespaces."""
    return re.sub(r'<.*', '', name).split('::')[-1]


def without_namespace(name):
    """"(anonymous namespace)::narrow_kernel<__half>" -> "narrow_kernel<__half>", as the
    ledger names kernels: what follows the last "::" outside template arguments."""
    depth, start = 0, 0
    for i, c in enumerate(name):
        depth += (c == '<') - (c == '>')
        if depth == 0 and name.startswith('::', i):
            start = i + 2
    return name[start:]


def launch_bounds(paths):
    """{kernel: max threads per block} from __launch_bounds__(N, ...) in the sources, N a
    number or a `static const int` / `constexpr int` / #define of the same file or optim.cuh."""
    constants, bounds = {}, {}
    texts = [open(p).read() for p in paths]
    for text in texts:
        for m in re.finditer(r'(?:const|constexpr)\s+int\s+([^;]*);', text):
            for name, value in re.findall(r'(\w+)\s*=\s*(\d+)', m.group(1)):
                constants[name] = int(value)
        for name, value in re.findall(r'#define\s+(\w+)\s+(\d+)\b', text):
            constants[name] = int(value)
    for text in texts:
        for expr, kernel in re.findall(r'__global__\s+void\s+__launch_bounds__\(\s*(\w+)[^)]*(?:\([^()]*\)[^)]*)*\)\s+(\w+)',
                                       text):
            bounds[kernel] = int(expr) if expr.isdigit() else constants[expr]
    return bounds


def read_budgets(path):
    budgets = {}
    with open(path) as f:
        for line in f:
            if line.startswith('#') or line.startswith('kernel\t') or not line.strip():
                continue
            fields = line.rstrip('\n').split('\t')
            budgets[without_namespace(fields[0])] = {'regs': int(fields[1]), 'shared': int(fields[4])}
    return budgets


def read_ledger(path):
    rows = []
    with open(path) as f:
        for line in f:
            name, threads, dynamic, cluster, opt_in, static, site = line.rstrip('\n').split('\t')
            rows.append({'kernel': name, 'threads': int(threads), 'dynamic': int(dynamic), 'cluster': int(cluster),
                         'opt_in': int(opt_in), 'site': site})
    return rows


def violations(rows, bounds, budgets, need_budget):
    """What a GPU would refuse in these launches, one line each naming kernel and rule."""
    out = []
    for r in rows:
        k, threads, dynamic = r['kernel'], r['threads'], r['dynamic']
        bound = bounds.get(base_name(k))
        if bound is not None and threads > bound:
            out.append(f'{k}: {threads} threads per block, more than its __launch_bounds__({bound})')
        b = budgets.get(k)
        if b is None:
            if need_budget:
                out.append(f'{k}: no row in budgets.tsv (its registers and shared memory unknown)')
            continue
        warps = (threads + 31) // 32
        regs = warps * ((b['regs'] * 32 + 255) // 256 * 256)
        if regs > REGISTERS_PER_BLOCK:
            out.append(f'{k}: {b["regs"]} registers x {threads} threads need {regs} registers, more than the '
                       f'{REGISTERS_PER_BLOCK} registers of a block')
        static = max(b['shared'] - 1024, 0)
        if static + dynamic > SHARED_PER_BLOCK:
            out.append(f'{k}: {static} bytes of static and {dynamic} of dynamic shared memory, more than the '
                       f'227 KB of a block')
        if dynamic > SHARED_DEFAULT and r['opt_in'] < dynamic:
            out.append(f'{k}: {dynamic} bytes of dynamic shared memory above 48 KB with an opt-in of only {r["opt_in"]}')
    return out


def run_with_ledger(ledger, args, env=None):
    e = dict(os.environ, BERTPRE_EMU_LAUNCH_LEDGER=ledger, **(env or {}))
    r = subprocess.run(args, capture_output=True, text=True, env=e)
    return r.returncode, r.stdout + r.stderr


def main():
    emu_test, ops_test, root = sys.argv[1], sys.argv[2], sys.argv[3]
    cuda = os.path.join(root, 'kernels', 'cuda')
    sources = [os.path.join(cuda, n) for n in sorted(os.listdir(cuda)) if n.endswith(('.cu', '.cuh'))]
    bounds = launch_bounds(sources)
    expect(f'__launch_bounds__ read from the sources: {len(bounds)} kernels ({", ".join(f"{k} {v}" for k, v in sorted(bounds.items()))})',
           len(bounds) >= 7 and bounds.get('flash_forward_kernel') == 128, bounds)
    budgets = read_budgets(os.path.join(cuda, 'budgets.tsv'))
    tmp = tempfile.TemporaryDirectory()

    # The check refuses a __launch_bounds__(128) kernel launched with 256 threads, and passes
    # its launch with 128.
    demo = os.path.join(tmp.name, 'demo.tsv')
    rc, out = run_with_ledger(demo, [emu_test, 'launch-bounds'])
    expect('test_cuda_emu launch-bounds runs both launches in the emulation', rc == 0, out)
    demo_rows = read_ledger(demo) if os.path.exists(demo) else []
    demo_bounds = launch_bounds([os.path.join(root, 'tests', 'test_cuda_emu.cpp')])
    found = violations(demo_rows, demo_bounds, {}, need_budget=False)
    expect('256 threads into __launch_bounds__(128) bounded_kernel refused: ' + '; '.join(found),
           len(demo_rows) == 2 and found == ['bounded_kernel: 256 threads per block, more than its __launch_bounds__(128)'],
           demo_rows)

    # Every launch of the op tests: the three precisions, and the split attention backward.
    ledger = os.path.join(tmp.name, 'ops.tsv')
    for args, env in [(['fp32'], {}), (['fp16'], {}), (['bf16'], {}),
                      (['fp16', '-o', 'attention'], {'BERTPRE_ATTN_BACKWARD': 'split'})]:
        rc, out = run_with_ledger(ledger, [ops_test] + args, env)
        expect(f'test_cuda_ops_emu {" ".join(args)} {env or ""} passes with the ledger on', rc == 0, out[-3000:])
    rows = read_ledger(ledger)
    kernels = sorted({r['kernel'] for r in rows})
    expect(f'the ledger holds {len(rows)} launch shapes of {len(kernels)} kernels', len(kernels) > 50, rows[:5])
    unnamed = [r['kernel'] for r in rows if r['kernel'].startswith('?')]
    expect('every launch named by its symbol (the executable has its symbol table)', not unnamed, unnamed[:5])
    bounded = {base_name(r['kernel']) for r in rows if base_name(r['kernel']) in bounds}
    expect(f'every kernel with __launch_bounds__ launched ({len(bounded)} of {len(bounds)})',
           bounded == set(bounds), sorted(set(bounds) - bounded))
    found = violations(rows, bounds, budgets, need_budget=True)
    expect(f'every launch within its __launch_bounds__, 65536 registers and 227 KB of shared memory per block '
           f'({len(found)} not)', not found, '\n'.join(found))
    worst = max(rows, key=lambda r: max(budgets[r['kernel']]['shared'] - 1024, 0) + r['dynamic'] if r['kernel'] in budgets else 0)
    print(f'     most shared memory: {worst["kernel"]} with {worst["threads"]} threads, '
          f'{max(budgets[worst["kernel"]]["shared"] - 1024, 0)} static + {worst["dynamic"]} dynamic bytes')

    def block_registers(r):
        b = budgets.get(r['kernel'])
        return (r['threads'] + 31) // 32 * ((b['regs'] * 32 + 255) // 256 * 256) if b else 0
    most = max(rows, key=block_registers)
    print(f'     most registers: {most["kernel"]} with {most["threads"]} threads, {block_registers(most)} of 65536')

    # The same check with one fault each must refuse, naming the kernel and the rule.
    fused = [r for r in rows if r['kernel'].startswith('flash_backward_fused_kernel<')]
    expect('the fused attention backward is in the ledger', bool(fused))
    if fused:
        big = dict(fused[0], dynamic=SHARED_PER_BLOCK - max(budgets[fused[0]['kernel']]['shared'] - 1024, 0) + 16)
        found = violations([big], bounds, budgets, need_budget=True)
        expect(f'a launch with 16 bytes of shared memory too many refused: {"; ".join(found)}',
               any(fused[0]['kernel'] in v and '227 KB' in v for v in found), found)
        heavy = dict(budgets)
        heavy[fused[0]['kernel']] = dict(budgets[fused[0]['kernel']], regs=65536 // fused[0]['threads'] + 8)
        found = violations(fused[:1], bounds, heavy, need_budget=True)
        expect(f'a budget of too many registers for the block refused: {"; ".join(found)}',
               any('65536 registers' in v for v in found), found)
    found = violations([dict(rows[0], kernel='no_such_kernel')], bounds, budgets, need_budget=True)
    expect('a kernel without a budgets.tsv row refused', any('no row in budgets.tsv' in v for v in found), found)
    return checks.exit_status()


if __name__ == '__main__':
    sys.exit(main())
