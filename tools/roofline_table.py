#!/usr/bin/env python3
"""The tables of docs/PERFORMANCE.md: `bertpre bench model --tsv` for the unfused kernels
(--baseline) and for the kernels the engine runs, summed per backend op, side by side, with
the micro-batch totals, the predicted step time, sequences/s and MFU.

usage: tools/roofline_table.py BERTPRE CONFIG [bench model options...]
"""
import subprocess
import sys


def bench(bertpre, args):
    out = subprocess.run([bertpre, "bench", "model", *args, "--tsv"], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    header = out[0].split("\t")
    rows, summary = [], {}
    for line in out[1:]:
        f = line.split("\t")
        if line.startswith("# "):
            summary[f[0][2:]] = f[1:]
        else:
            rows.append(dict(zip(header, f)))
    return rows, summary


def per_op(rows):
    ops = {}
    for r in rows:
        if r["phase"] == "opt":
            continue
        key = (r["phase"], r["op"])
        o = ops.setdefault(key, {"launches": 0, "syncs": 0, "flops": 0.0, "bytes": 0.0, "time": 0.0, "bounds": set()})
        if r["bound"] == "H":
            o["syncs"] += int(r["host_syncs"])
        else:
            o["launches"] += 1
        o["flops"] += float(r["flops"])
        o["bytes"] += float(r["bytes"])
        o["time"] += float(r["time_s"])
        o["bounds"].add(r["bound"])
    return ops


def main():
    bertpre, args = sys.argv[1], sys.argv[2:]
    before, sb = bench(bertpre, args + ["--baseline"])
    after, sa = bench(bertpre, args)
    ob, oa = per_op(before), per_op(after)
    print("| phase | op | before: launches | round trips | GB | ms | bound | after: launches | round trips | GB | ms "
          "| bound |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for key in ob:
        b, a = ob[key], oa.get(key)
        cells = [key[0], f"`{key[1]}`", str(b["launches"]), str(b["syncs"]), f"{b['bytes'] / 1e9:.2f}",
                 f"{b['time'] * 1e3:.2f}", "".join(sorted(b["bounds"]))]
        if a:
            cells += [str(a["launches"]), str(a["syncs"]), f"{a['bytes'] / 1e9:.2f}", f"{a['time'] * 1e3:.2f}",
                      "".join(sorted(a["bounds"]))]
        else:
            cells += ["0", "0", "", "", ""]
        print("| " + " | ".join(cells) + " |")
    for name, rows, s in (("before", before, sb), ("after", after, sa)):
        micro = [r for r in rows if r["phase"] != "opt"]
        gemm = [r for r in micro if float(r["flops"]) > 0]
        t = sum(float(r["time_s"]) for r in micro)
        tg = sum(float(r["time_s"]) for r in gemm)
        by = sum(float(r["bytes"]) for r in micro)
        bg = sum(float(r["bytes"]) for r in gemm)
        print(f"\n{name}: micro-batch {len(micro) - sum(r['bound'] == 'H' for r in micro)} launches, "
              f"{sum(int(r['host_syncs']) for r in micro)} host round trips, DRAM {by / 1e9:.1f} GB "
              f"({bg / 1e9:.1f} GB in tensor-core launches, {(by - bg) / 1e9:.1f} GB in the rest), "
              f"{t * 1e3:.1f} ms (tensor-core launches {tg * 1e3:.1f} ms = {100 * tg / t:.0f}%); "
              f"step {float(s['step_time_s'][0]):.2f} s for {s['micro_batch'][3]} micro-batches, "
              f"{float(s['sequences_per_s'][0]):.0f} sequences/s, MFU {100 * float(s['mfu'][0]):.1f}%")


main()
