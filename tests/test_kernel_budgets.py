"""The CUDA kernels' sm_90 registers, stack, local stores, shared memory and SASS counts stay
within kernels/cuda/budgets.tsv (tools/kernel_budgets.py check on meson's libkernels_cuda.a).

The numbers come from cuobjdump, not from the code under test, and are measured once. Every
__global__ function of kernels/cuda/*.cu[h] (found here with a regular expression over the
sources) must be among them. Before trusting the pass, the checker is shown able to fail:
tables made from the measured numbers with one fault each (one kernel's register budget
lowered by one, its row removed, a row for a kernel that does not exist, its SASS budget one
below the 2% margin, the largest loop body's budget one below the margin) must be rejected
naming that kernel, and counts right at the margin must pass. Skips (77) where cuobjdump or the sm_90 build is missing.

usage: test_kernel_budgets.py TOOL LIB
"""
import os
import re
import subprocess
import sys
import tempfile


def run(tool, *args):
    r = subprocess.run([sys.executable, tool] + list(args), capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    tool, lib = sys.argv[1], sys.argv[2]
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tool))), 'kernels', 'cuda')
    rc, out = run(tool, 'show', lib)
    if rc == 77:
        print(out.strip())
        return 77
    assert rc == 0, out
    rows = [line.split('\t') for line in out.splitlines() if line and not line.startswith(('#', 'kernel\t'))]
    names = [r[0] for r in rows]
    # Every __global__ function declared in kernels/cuda/*.cu[h] (read here from the sources)
    # appears at least once: the parser saw all of them.
    declared = set()
    for name in sorted(os.listdir(src)):
        if name.endswith(('.cu', '.cuh')):
            with open(os.path.join(src, name)) as f:
                declared |= set(re.findall(r'__global__\s+void\s+(?:__launch_bounds__\((?:[^()]|\([^()]*\))*\)\s+)?(\w+)', f.read()))
    assert len(declared) > 20, declared
    measured = {re.sub(r'<.*', '', n).split('::')[-1] for n in names}  # without a namespace
    assert declared <= measured, 'kernels in the sources but not measured: %s' % sorted(declared - measured)
    assert all(int(r[5]) > 0 and int(r[1]) > 0 for r in rows), 'a kernel without instructions or registers'

    tmp_dir = tempfile.TemporaryDirectory()
    current = os.path.join(tmp_dir.name, 'current.tsv')
    with open(current, 'w') as f:
        f.write(out)
    # measured once (above); every check below compares those numbers with a table
    rc, out = run(tool, '--current', current, 'check')
    print(out.strip())
    if rc != 0:
        return 1

    # Tables made here from the measured numbers, each with one fault, must be rejected.
    with open(current) as f:
        lines = f.read().splitlines()
    data = [i for i, line in enumerate(lines) if line and not line.startswith(('#', 'kernel\t'))]
    # the kernel with the most registers: its budget lowered by one must fail, naming it
    victim = max(data, key=lambda i: int(lines[i].split('\t')[1]))
    fields = lines[victim].split('\t')
    with tmp_dir:
        def check_with(new_lines):
            path = os.path.join(tmp_dir.name, 'budgets.tsv')
            with open(path, 'w') as f:
                f.write('\n'.join(new_lines) + '\n')
            return run(tool, '--table', path, '--current', current, 'check')

        tight = list(lines)
        tight[victim] = '\t'.join([fields[0], str(int(fields[1]) - 1)] + fields[2:])
        rc, out = check_with(tight)
        assert rc == 1 and fields[0] + ': regs' in out, 'a lowered register budget passed:\n' + out

        missing = lines[:victim] + lines[victim + 1:]
        rc, out = check_with(missing)
        assert rc == 1 and fields[0] + ': no budget' in out, 'a missing row passed:\n' + out

        stale = lines + ['no_such_kernel<float>\t1\t0\t0\t0\t1\t0\t0']
        rc, out = check_with(stale)
        assert rc == 1 and 'no_such_kernel<float>: in' in out, 'a row for a kernel not built passed:\n' + out

        # the lowest budget that a count still fits within 2% (at least 2) passes, one less fails:
        # the whole kernel's SASS (column 5) of the kernel above, and the largest loop body
        # (column 6) of the kernel that has the largest
        looped = max(data, key=lambda i: int(lines[i].split('\t')[6]))
        for row, column, what in ((victim, 5, 'sass'), (looped, 6, 'loop1')):
            cells = lines[row].split('\t')
            count = int(cells[column])
            assert count > 0, '%s: no %s measured' % (cells[0], what)
            lowered = count - 1
            while lowered + max(2, int(lowered * 0.02)) >= count and lowered > 0:
                lowered -= 1
            edge = list(lines)
            edge[row] = '\t'.join(cells[:column] + [str(lowered + 1)] + cells[column + 1:])
            rc, out = check_with(edge)
            assert rc == 0, 'a %s count within 2%% of the budget failed:\n%s' % (what, out)
            edge[row] = '\t'.join(cells[:column] + [str(lowered)] + cells[column + 1:])
            rc, out = check_with(edge)
            assert rc == 1 and cells[0] + ': ' + what in out, 'a %s count over 2%% passed:\n%s' % (what, out)
    print('the checker rejects a lowered register budget, a missing row, a stale row, and SASS and a loop body '
          'over the margin')
    return 0


if __name__ == '__main__':
    sys.exit(main())
