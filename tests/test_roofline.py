"""`bertpre bench model`: the roofline model's launches, counts and times, checked against
formulas written here, not against bertpre's own numbers.

- FLOPs: the baseline's tensor-core FLOPs equal the model-FLOPs formula of
  engine/flops.h (re-implemented here from its comment: 6 x forward multiply-adds) for
  BERT-large at seq 128 (micro-batch 256) and seq 512 (micro-batch 32), with the vocabulary
  padded to a multiple of 8 (the decoder GEMM runs on 30528 columns: 6 x R x C x 6 more),
  and exactly without that term for a vocabulary already a multiple of 8. Relative error
  <= 1e-12: both sides sum the same integers in doubles (exact below 2^53 per term).
- Bytes: the minimum DRAM bytes of bias + GELU, a LayerNorm, residual + dropout + LayerNorm,
  the one-pass LayerNorm + dropout backward (and the baseline's separate partials pass), a
  biased GEMM and the MLM cross-entropy backward, from hand-written formulas, exactly
  (integers in doubles).
- The fused attention against formulas from its kernels' SASS counts per warp and tile (the
  tables of docs/PERFORMANCE.md): the forward's bytes and instructions; on an H100 (clusters)
  the one-kernel backward's FLOPs (5 products), bytes (delta on chip), instructions (the dq
  sum's passes apart) and time, the larger of its three; on an A100 (no clusters) the split
  delta, dq and dk/dv kernels. LayerNorm + dropout: the forward writes and the backward
  reads the keep bits (N C / 8 bytes), the backward charged no Philox instructions.
- Times: a compute-bound GEMM takes FLOPs / (989.4 TFLOP/s x 0.70), a memory-bound launch
  bytes / (3350 GB/s x 0.80) (H100 SXM); --gemm-efficiency 0.35 doubles the GEMM time; the
  step time and MFU follow from the launches (relative error <= 1e-12).
- The tanh GELU (hidden_act gelu_new): the FFN GEMMs with GELU_AUX_BIAS / DGELU_BGRAD, their
  bytes by formula, no bias + GELU pass over the FFN's width; both GELU forms summarized.
- Coverage: every backend op that engine/model.c, engine/train.c and engine/optim.c call
  (found here by reading those sources) appears in the output.
- The kernels the engine runs against --baseline (the unfused ones they replaced): the fused
  ops costed as their unfused launches, FLOPs exactly the formula there and the formula plus
  the flash backward's recomputation now; no permutes and 2 flash-attention launches per
  layer now, 7 host round trips per micro-batch (14 in the baseline), fewer bytes.
- ModernBERT-base at seq 1024 (attention dropout 0 and 0.1) and 512: the windowed layers'
  attention FLOPs from the key tiles the window reaches (pair counts worked out by hand in the
  comment there), the global ones' T^2, in the forward and both backwards (the one-kernel
  backward's key blocks skip the query tiles that do not reach them); keep bits only up to 512; past 512 the split backward
  on an H100 with its instructions from budgets.tsv's rows (drawing again when dropout is on);
  embeddings without position and token-type tables; RoPE and GeGLU launches.
- Errors: an unknown --gpu and a --seq beyond max_position_embeddings name the value.

With `unpadded` (the test bench_model_unpadded), the unpadded step of a length distribution:
- A histogram with every row full: the unpadded launches equal the padded ones (FLOPs,
  bytes, instructions, times; relative 1e-12, the per-length attention sum multiplies by B
  after instead of before) and the padded launches are exactly those of a run without it.
- A histogram of lengths 2..T (odd ones among them), BERT-large phase 2 and phase 1 shapes,
  against formulas written here from the lengths: the tensor-core FLOPs = the model formula
  per sequence at its own length (Sum L and Sum L^2) + the padded vocabulary + the flash
  backward's recomputation on Sum L^2; the bytes of bias + GELU, LayerNorm, the QKV GEMM at
  N = B x mean length rows; the fused attention's FLOPs and bytes summed over the lengths;
  the MLM cross-entropy, the pooler GEMM and the optimizer unchanged; step time, sequences/s
  and MFU on real tokens from them (relative 1e-12: sums of doubles in another order).
- Shards written by h5py: --lengths reads the count of ones of every row's input_mask (the
  same distribution, and the same prediction, as the histogram computed here with numpy).
- Errors: a histogram line that is not two integers, a length beyond seq, a length given
  twice, an empty histogram, shards of another sequence length, both options at once: exit 1
  naming the file, the line or dataset and the value.

usage: test_roofline.py BERTPRE SOURCE_ROOT [unpadded]
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import json

import checks
from checks import expect

bertpre, root = sys.argv[1], sys.argv[2]
configs = os.path.join(root, "configs")


def run(*args):
    return subprocess.run([bertpre, "bench", "model", *args], capture_output=True, text=True)


def tsv(*args):
    p = run(*args, "--tsv")
    if p.returncode != 0:
        expect(f"bench model {' '.join(args)} runs", False, p.stderr)
        sys.exit(checks.exit_status())
    rows, summary = [], {}
    lines = p.stdout.splitlines()
    header = lines[0].split("\t")
    for line in lines[1:]:
        f = line.split("\t")
        if line.startswith("# "):
            summary[f[0][2:]] = f[1:]
            continue
        r = dict(zip(header, f))
        for k in ("flops", "bytes", "instructions", "time_s"):
            r[k] = float(r[k])
        rows.append(r)
    return rows, summary


def model_flops(cfg, sequences, T, masked):
    L, C, I, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    per_seq = L * T * (4 * C * C + 2 * C * I) + L * 2 * T * T * C + C * C + 2 * C
    return 6 * (per_seq * sequences + (C * C + C * V) * masked)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


large = json.load(open(os.path.join(configs, "bert-large.json")))
H100_FLOPS, H100_BYTES = 989.4e12, 3350e9


def tsv_layouts(*args):
    """Padded rows, unpadded rows and the summary of a run with a length distribution."""
    rows, summary = tsv(*args)
    return ([r for r in rows if r["layout"] == "padded"], [r for r in rows if r["layout"] == "unpadded"], summary)


def write_histogram(path, hist):
    with open(path, "w") as f:
        f.write("# length count\n")
        for length, count in sorted(hist.items()):
            f.write(f"{length} {count}\n")


def same_launches(a, b, tol):
    keys = ("flops", "bytes", "instructions", "time_s")
    return len(a) == len(b) and all(x["launch"] == y["launch"] and all(rel(x[k], y[k]) <= tol if y[k] else x[k] == 0
                                                                           for k in keys) for x, y in zip(a, b))


def unpadded_checks(hdf5):
    tmp = tempfile.mkdtemp()
    L, V, C, I, NH = (large[k] for k in ("num_hidden_layers", "vocab_size", "hidden_size", "intermediate_size",
                                         "num_attention_heads"))
    Vp, A, HS = (V + 7) // 8 * 8, 2, C // NH
    for config, B, T, P in (("bert-large-phase1.json", 256, 128, 20), ("bert-large-phase2.json", 32, 512, 80)):
        path = os.path.join(configs, config)
        # Every row full: nothing changes.
        full = os.path.join(tmp, f"full{T}.txt")
        write_histogram(full, {T: 1000})
        plain, _ = tsv(path)
        padded, unpadded, summary = tsv_layouts(path, "--length-histogram", full)
        keys = ("phase", "op", "launch", "shape", "flops", "bytes", "instructions", "host_syncs", "time_s", "bound")
        expect(f"{config}: with a histogram the padded launches are exactly those without one ({len(plain)})",
               [[r[k] for k in keys] for r in plain] == [[r[k] for k in keys] for r in padded])
        expect(f"{config}: every row full ({T}): the unpadded launches equal the padded ones (rel <= 1e-12)",
               same_launches(unpadded, padded, 1e-12))

        # Lengths 2..T, odd ones among them.
        hist = {2: 3, 7: 5, 33: 11, T // 2 + 1: 7, T - 1: 13, T: 40}
        rows = sum(hist.values())
        mean = sum(l * c for l, c in hist.items()) / rows
        mean_sq = sum(l * l * c for l, c in hist.items()) / rows
        hpath = os.path.join(tmp, f"hist{T}.txt")
        write_histogram(hpath, hist)
        padded, unpadded, summary = tsv_layouts(path, "--length-histogram", hpath)
        got = [float(x) for x in summary["lengths"]]
        expect(f"{config}: summary: {rows} rows, mean length {mean:.4f}, mean square {mean_sq:.2f}",
               got[0] == rows and rel(got[1], mean) <= 1e-12 and rel(got[2], mean_sq) <= 1e-12, summary["lengths"])
        N = B * mean  # the mean micro-batch's real tokens
        S1, S2 = B * mean, B * mean_sq  # its Sum L and Sum L^2
        R = B * P
        micro = [r for r in unpadded if r["phase"] != "opt"]
        gemm = sum(r["flops"] for r in micro)
        model = 6 * (L * (4 * C * C + 2 * C * I) * S1 + L * 2 * C * S2 + B * (C * C + 2 * C) + R * (C * C + C * V))
        expect_gemm = model + 6 * R * C * (Vp - V) + L * 2 * 1 * C * S2  # the one-kernel backward's S
        e = rel(gemm, expect_gemm)
        expect(f"{config} unpadded: tensor-core FLOPs {gemm:.6g} = model formula per sequence at its length + "
               f"padded vocabulary + flash recomputation {expect_gemm:.6g} (rel {e:.1e} <= 1e-12)", e <= 1e-12)
        real = float(summary["unpadded_real_model_flops"][0])
        expect(f"{config} unpadded: real-token model FLOPs {real:.6g} = {model:.6g}", rel(real, model) <= 1e-12)
        expect(f"{config} unpadded: {N:.2f} real tokens per micro-batch",
               rel(float(summary["unpadded_real_tokens"][0]), N) <= 1e-12)

        def one(rs, op, launch, count):
            g = [r for r in rs if r["op"] == op and r["launch"] == launch]
            return g if len(g) == count else None

        g = one(unpadded, "bias_gelu_forward", "bias_gelu_forward", L + 1)  # the layers' and the MLM head's
        want = 2 * N * I * A + I * A
        expect(f"{config} unpadded: bias_gelu_forward on N = {N:.1f} rows: 2 N I A + I A = {want:.0f} bytes",
               g is not None and all(rel(r["bytes"], want) <= 1e-12 for r in g[:L]) and
               g[L]["bytes"] == 2 * R * C * A + C * A, g and g[:1])
        g = one(unpadded, "layernorm_forward", "layernorm_forward", 2)  # embeddings, MLM head
        want = 2 * N * C * A + 2 * C * A + 2 * N * 4
        expect(f"{config} unpadded: embedding LayerNorm 2 N C A + 2 C A + 8 N = {want:.0f} bytes, the MLM head's "
               f"on R = {R} rows unchanged", g is not None and rel(g[0]["bytes"], want) <= 1e-12
               and g[1]["bytes"] == 2 * R * C * A + 2 * C * A + 2 * R * 4, g)
        qkv = [r for r in unpadded if r["op"] == "matmul_forward" and r["shape"].endswith(f"IC={C} OC={3 * C}")]
        want_b, want_f = (N * C + 3 * C * C + N * 3 * C + 3 * C) * A, 2 * N * C * 3 * C
        expect(f"{config} unpadded: QKV GEMM {want_f:.6g} FLOPs, {want_b:.0f} bytes",
               len(qkv) == L and all(rel(r["flops"], want_f) <= 1e-12 and rel(r["bytes"], want_b) <= 1e-12
                                     for r in qkv), qkv[:1])
        pool = [r for r in unpadded if r["op"] == "matmul_forward" and r["shape"] == f"N={B} IC={C} OC={C}"]
        expect(f"{config} unpadded: the pooler GEMM stays at B = {B} rows",
               len(pool) == 1 and pool[0]["flops"] == 2 * B * C * C, pool)
        ce_u = [r for r in unpadded if r["launch"] == "crossentropy_backward" and r["shape"].startswith(f"N={R} ")]
        ce_p = [r for r in padded if r["launch"] == "crossentropy_backward" and r["shape"].startswith(f"N={R} ")]
        expect(f"{config} unpadded: the MLM cross-entropy over the R = {R} masked positions unchanged",
               len(ce_u) == 1 and same_launches(ce_u, ce_p, 0.0))
        # The fused attention, summed over sequences at their own lengths: per sequence of
        # length l, Q K^T and P V are 4 NH l^2 HS FLOPs; bytes: Q, K, V read and the context
        # written (4 l C A), the log-sum-exp (4 NH l), the mask (4 l) and the keep bits.
        fwd = one(unpadded, "attention_forward", "flash_forward", L)

        def per_length(f):
            return sum(B * c / rows * f(l) for l, c in hist.items())

        want_f = per_length(lambda l: 4 * NH * l * l * HS)
        want_b = per_length(lambda l: 4 * l * C * A + NH * l * 4 + l * 4 + NH * l * ((l + 63) // 64 * 2) * 4)
        expect(f"{config} unpadded: flash_forward {want_f:.6g} FLOPs, {want_b:.6g} bytes per layer, summed over the "
               "lengths", fwd is not None and all(rel(r["flops"], want_f) <= 1e-12 and rel(r["bytes"], want_b) <= 1e-12
                                                  for r in fwd), fwd and fwd[:1])
        opt_u = [r for r in unpadded if r["phase"] == "opt"]
        opt_p = [r for r in padded if r["phase"] == "opt"]
        expect(f"{config} unpadded: the optimizer step unchanged ({len(opt_p)} launches)",
               same_launches(opt_u, opt_p, 0.0))
        accum = int(summary["micro_batch"][3])
        step = accum * sum(r["time_s"] for r in micro) + sum(r["time_s"] for r in opt_u)
        step_p = float(summary["step_time_s"][0])
        mfu = accum * model / step / H100_FLOPS
        expect(f"{config} unpadded: step {step:.3f} s (padded {step_p:.3f} s), {accum * B / step:.1f} sequences/s, "
               f"MFU on real tokens {100 * mfu:.1f}%",
               rel(float(summary["unpadded_step_time_s"][0]), step) <= 1e-12
               and rel(float(summary["unpadded_sequences_per_s"][0]), accum * B / step) <= 1e-12
               and rel(float(summary["unpadded_real_mfu"][0]), mfu) <= 1e-12
               and rel(float(summary["padded_real_mfu"][0]), accum * model / step_p / H100_FLOPS) <= 1e-12
               and step < step_p, summary)

    # Shards written by h5py: lengths from the ones of input_mask.
    if hdf5:
        import h5py
        import numpy as np
        T, P = 128, 20
        rng = np.random.default_rng(5)
        lengths = [rng.integers(2, T + 1, 300), rng.integers(2, T + 1, 77)]
        lengths[0][:40] = T
        shards = os.path.join(tmp, "shards")
        os.makedirs(shards)
        for k, lens in enumerate(lengths):
            n = len(lens)
            mask = (np.arange(T)[None, :] < lens[:, None]).astype("i1")
            with h5py.File(os.path.join(shards, f"train-{k}.hdf5"), "w") as f:
                f.create_dataset("input_ids", data=np.where(mask, 5, 0).astype("i4"))
                f.create_dataset("input_mask", data=mask)
                f.create_dataset("segment_ids", data=np.zeros((n, T), "i1"))
                f.create_dataset("masked_lm_positions", data=np.zeros((n, P), "i4"))
                f.create_dataset("masked_lm_ids", data=np.zeros((n, P), "i4"))
                f.create_dataset("next_sentence_labels", data=np.zeros(n, "i1"))
        all_lengths = np.concatenate(lengths)
        hist = {int(l): int(c) for l, c in zip(*np.unique(all_lengths, return_counts=True))}
        hpath = os.path.join(tmp, "from_numpy.txt")
        write_histogram(hpath, hist)
        path = os.path.join(configs, "bert-large-phase1.json")
        _, from_shards, s1 = tsv_layouts(path, "--lengths", shards)
        _, from_hist, s2 = tsv_layouts(path, "--length-histogram", hpath)
        expect(f"--lengths SHARDS: {len(all_lengths)} rows of mean length {all_lengths.mean():.3f} (numpy), the same "
               "prediction as the histogram of those lengths",
               s1["lengths"] == s2["lengths"] and int(s1["lengths"][0]) == len(all_lengths)
               and rel(float(s1["lengths"][1]), all_lengths.mean()) <= 1e-12
               and same_launches(from_shards, from_hist, 0.0), (s1["lengths"], s2["lengths"]))
        p = run(os.path.join(configs, "bert-large-phase2.json"), "--lengths", shards)
        expect("--lengths with shards of seq 128 for seq 512: exit 1 naming the file, dataset and both lengths",
               p.returncode == 1 and "train-0.hdf5" in p.stderr and "input_ids" in p.stderr and "128" in p.stderr
               and "512" in p.stderr, p.stderr)
        p = run(path, "--lengths", shards, "--length-histogram", hpath)
        expect("--lengths and --length-histogram together: exit 1", p.returncode == 1 and "not both" in p.stderr,
               p.stderr)
    else:
        print("note: bertpre was built without HDF5: --lengths SHARDS not checked")

    path = os.path.join(configs, "bert-large-phase1.json")
    for text, what in (("128 10\n12 x\n", ["line 2", "'12 x'"]), ("129 4\n", ["line 1", "129", "128"]),
                       ("# lengths\n64 1\n\n64 2\n", ["line 4", "64", "second time"]),
                       ("-3 1\n", ["line 1", "-3"]), ("5 -1\n", ["line 1", "-1"]), ("# nothing\n", ["no row"])):
        bad = os.path.join(tmp, "bad.txt")
        with open(bad, "w") as f:
            f.write(text)
        p = run(path, "--length-histogram", bad)
        expect(f"histogram {text!r}: exit 1 naming the file and {', '.join(what)}",
               p.returncode == 1 and "bad.txt" in p.stderr and all(w in p.stderr for w in what), p.stderr)
    p = run(path, "--length-histogram", os.path.join(tmp, "missing.txt"))
    expect("a missing histogram file: exit 1 naming it", p.returncode == 1 and "missing.txt" in p.stderr, p.stderr)
    sys.exit(checks.exit_status())


if len(sys.argv) > 3 and sys.argv[3] == "unpadded":
    unpadded_checks(checks.features(bertpre)["hdf5"])

for config, B, T, P in (("bert-large-phase1.json", 256, 128, 20), ("bert-large-phase2.json", 32, 512, 80)):
    path = os.path.join(configs, config)
    rows, summary = tsv(path, "--gpu", "h100")
    base, _ = tsv(path, "--gpu", "h100", "--baseline")
    R = B * P
    L, V, C, I, NH = (large[k] for k in ("num_hidden_layers", "vocab_size", "hidden_size", "intermediate_size",
                                         "num_attention_heads"))
    Vp = (V + 7) // 8 * 8
    N, A = B * T, 2
    micro = [r for r in rows if r["phase"] != "opt"]
    padded = model_flops(large, B, T, R) + 6 * R * C * (Vp - V)
    gemm = sum(r["flops"] for r in base if r["phase"] != "opt")
    e = rel(gemm, padded)
    expect(f"{config} --baseline: tensor-core FLOPs {gemm:.6g} = model formula with V padded to {Vp} "
           f"{padded:.6g} (rel {e:.1e} <= 1e-12)", e <= 1e-12)
    # The fused attention's backward in one kernel (an H100 has clusters) recomputes S: per
    # head 5 products of T x T x HS (S, dP, dQ, dV, dK) where the model counts 4.
    recompute = L * 2 * 1 * B * T * T * C
    gemm = sum(r["flops"] for r in micro)
    e = rel(gemm, padded + recompute)
    expect(f"{config}: tensor-core FLOPs {gemm:.6g} = that + the flash backward's recomputation "
           f"{recompute:.6g} (rel {e:.1e} <= 1e-12)", e <= 1e-12)

    def find(rs, op, launch, shape):
        return [r for r in rs if r["op"] == op and r["launch"] == launch and r["shape"] == shape]

    g = find(rows, "bias_gelu_forward", "bias_gelu_forward", f"N={N} C={I}")
    expect(f"{config}: bias_gelu_forward on [N,I] = 2 N I A + I A = {2 * N * I * A + I * A} bytes, {L} launches",
           len(g) == L and all(r["bytes"] == 2 * N * I * A + I * A for r in g), g[:1])
    g = find(base, "bias_gelu_forward", "gelu_forward", f"N={N} C={I}")
    expect(f"{config} --baseline: the GELU pass alone, 2 N I A = {2 * N * I * A} bytes",
           len(g) == L and all(r["bytes"] == 2 * N * I * A for r in g), g[:1])
    ln_bytes = 2 * N * C * A + 2 * C * A + 2 * N * 4
    ln = find(rows, "layernorm_forward", "layernorm_forward", f"N={N} C={C}")
    expect(f"{config}: embedding layernorm_forward = 2 N C A + 2 C A + 8 N = {ln_bytes} bytes",
           len(ln) == 1 and ln[0]["bytes"] == ln_bytes, ln)
    rd = find(rows, "residual_dropout_layernorm_forward", "residual_dropout_layernorm", f"N={N} C={C}")
    rd_bytes = 4 * N * C * A + 2 * C * A + 2 * N * 4 + N * C // 8
    expect(f"{config}: residual + dropout + LayerNorm = 4 N C A + 2 C A + 8 N + the keep bits N C / 8 = {rd_bytes} "
           f"bytes, {2 * L} launches",
           len(rd) == 2 * L and all(r["bytes"] == rd_bytes for r in rd), rd[:1])
    lnb = find(base, "residual_dropout_layernorm_forward", "layernorm_forward", f"N={N} C={C}")
    expect(f"{config} --baseline: the fused op costed as dropout_residual + layernorm_forward ({2 * L} each)",
           len(lnb) == 2 * L and all(r["bytes"] == ln_bytes for r in lnb)
           and len(find(base, "residual_dropout_layernorm_forward", "dropout_residual", f"N={N} C={C}")) == 2 * L)
    # LayerNorm backward in one pass: dout and the input read once, dinp (and the dropout
    # backward's output) written, min(256, ceil(N / 64)) chunks of FP32 weight/bias partials
    # written beside them and read back by the second launch; the baseline read dout and the
    # input a second time in a separate partials pass.
    chunks = min(256, -(-N // 64))
    part = chunks * 2 * C * 4
    lnd = find(rows, "layernorm_dropout_backward", "layernorm_dropout_backward", f"N={N} C={C}")
    lnd_bytes = 4 * N * C * A + C * A + 2 * N * 4 + part + N * C // 8
    lna = find(rows, "layernorm_dropout_backward", "layernorm_add_partials", f"N={N} C={C}")
    expect(f"{config}: LayerNorm + dropout backward = 4 N C A + C A + 8 N + 8 C chunks + the forward's keep bits "
           f"N C / 8 = {lnd_bytes} bytes, no Philox instructions, and the partials' sum, {2 * L} launches each, no "
           "partials pass",
           len(lnd) == 2 * L and all(r["bytes"] == lnd_bytes and r["instructions"] == 0 for r in lnd)
           and len(lna) == 2 * L and all(r["bytes"] == part + 4 * C * 4 for r in lna)
           and not any(r["launch"] == "layernorm_partials" for r in rows), lnd[:1])
    lnp = find(base, "layernorm_dropout_backward", "layernorm_partials", f"N={N} C={C}")
    expect(f"{config} --baseline: the partials pass reads dout and the input, 2 N C A + 8 N + 8 C chunks = "
           f"{2 * N * C * A + 2 * N * 4 + part} bytes, {2 * L} launches",
           len(lnp) == 2 * L and all(r["bytes"] == 2 * N * C * A + 2 * N * 4 + part for r in lnp), lnp[:1])
    mm = find(rows, "matmul_forward", "gemm (forward)", f"N={N} IC={C} OC={3 * C}")
    mm_bytes = (N * C + 3 * C * C + N * 3 * C + 3 * C) * A
    mm_flops = 2 * N * C * 3 * C
    expect(f"{config}: QKV GEMM: {mm_flops} FLOPs, (N C + 3C C + 3N C + 3C) A = {mm_bytes} bytes",
           len(mm) == L and all(r["bytes"] == mm_bytes and r["flops"] == mm_flops for r in mm), mm[:1])
    t_expect = max(mm_flops / (H100_FLOPS * 0.70), mm_bytes / (H100_BYTES * 0.80))
    expect(f"{config}: QKV GEMM time = max(FLOPs / 70% peak, bytes / 80% bandwidth) = {t_expect * 1e6:.2f} us",
           rel(mm[0]["time_s"], t_expect) <= 1e-12 and mm[0]["bound"] == "C", mm[:1])
    ce = find(rows, "crossentropy_backward", "crossentropy_backward", f"N={R} V={V} Vp={Vp}")
    ce_bytes = R * V * A + R * Vp * A + R * 4
    expect(f"{config}: MLM cross-entropy backward = R V A + R Vp A + 4 R = {ce_bytes} bytes",
           len(ce) == 1 and ce[0]["bytes"] == ce_bytes, ce)
    expect(f"{config}: memory-bound launch time = bytes / 80% bandwidth",
           rel(ce[0]["time_s"], ce_bytes / (H100_BYTES * 0.80)) <= 1e-12 and ce[0]["bound"] == "M", ce)
    permutes = [r for r in base if r["launch"].startswith("permute")]
    expect(f"{config} --baseline: the permutes are flagged instruction-bound (five per layer)",
           len(permutes) == 5 * L and all(r["bound"] == "I" and r["instructions"] > 0 for r in permutes))
    flash = [r for r in rows if r["launch"].startswith("flash")]
    syncs = sum(int(r["host_syncs"]) for r in micro)
    expect(f"{config}: no permute, 2 flash-attention launches per layer (forward, one-kernel backward), 7 host "
           f"round trips (the forward's copies), DRAM {sum(r['bytes'] for r in micro) / 1e9:.1f} GB < baseline "
           f"{sum(r['bytes'] for r in base if r['phase'] != 'opt') / 1e9:.1f} GB",
           not any(r["launch"].startswith("permute") for r in rows) and len(flash) == 2 * L and syncs == 7
           and sum(r["bytes"] for r in micro) < sum(r["bytes"] for r in base if r["phase"] != "opt"))

    # The fused attention's launches against formulas written here from the kernels' SASS
    # counts per warp and tile (docs/PERFORMANCE.md's tables: FP16, head size 64, sm_90;
    # counts, not measurements). Head size HS = C / NH; H = B NH heads; warps of 16 rows,
    # tiles of 64 keys; K = T / 64 tiles; 32 thread instructions per warp instruction.
    HS, H, K = C // NH, B * NH, T // 64
    words = (T + 63) // 64 * 2  # keep-bit words per row
    keep = H * T * words * 4
    warps = H * T // 16
    # Forward: about 450 per warp outside the loop, 842 per tile, 908 on the last (padding select).
    fw = find(rows, "attention_forward", "flash_forward", f"B={B} T={T} C={C} NH={NH}")
    fw_b = 4 * N * C * A + H * T * 4 + N * 4 + keep
    fw_i = 32 * warps * (450 + (K - 1) * 842 + 908)
    expect(f"{config}: flash_forward reads Q, K, V, writes out, lse, keep bits: {fw_b} bytes; "
           f"{fw_i / 1e9:.3f} G instructions (450 + {K - 1} x 842 + 908 per warp)",
           len(fw) == L and all(r["bytes"] == fw_b and rel(r["instructions"], fw_i) <= 1e-12 for r in fw), fw[:1])
    # Backward in one kernel: reads Q, K, V, out, dout, lse, keep bits; writes dQ, dK, dV.
    # Per warp and tile 1,520 with one pass of the dq sum (151) inside; the sum runs HS / 2
    # warp passes per query tile (16 HS float4 columns over 32 lanes); 2,304 - 1,520 outside.
    bw = find(rows, "attention_backward", "flash_backward_fused", f"B={B} T={T} C={C} NH={NH}")
    bw_b = 8 * N * C * A + H * T * 4 + N * 4 + keep
    bw_i = 32 * (warps * K * (1520 - 151) + H * K * (HS // 2) * 151 + warps * (2304 - 1520))
    bw_f = 10 * H * T * T * HS
    t_i = bw_i / (132 * 128 * 1830e6)
    t_b = bw_b / (H100_BYTES * 0.80)
    t_f = bw_f / (H100_FLOPS * 0.70)
    expect(f"{config}: flash_backward_fused {bw_f:.6g} FLOPs (5 products), {bw_b} bytes, {bw_i / 1e9:.3f} G "
           f"instructions; time max(FLOPs {t_f * 1e6:.1f}, bytes {t_b * 1e6:.1f}, issue {t_i * 1e6:.1f} us)",
           len(bw) == L and all(r["flops"] == bw_f and r["bytes"] == bw_b and rel(r["instructions"], bw_i) <= 1e-12
                                and rel(r["time_s"], max(t_i, t_b, t_f)) <= 1e-12 for r in bw), bw[:1])
    # Without clusters (A100): delta, dq and dk/dv kernels; dq 874 per tile, dk/dv 911 + 688
    # (its outer loop holds one half-tile, the second runs again), their whole kernels 1,417
    # and 1,570 less those loops outside.
    a100, _ = tsv(path, "--gpu", "a100")
    q = find(a100, "attention_backward", "flash_backward_q", f"B={B} T={T} C={C} NH={NH}")
    kv = find(a100, "attention_backward", "flash_backward_kv", f"B={B} T={T} C={C} NH={NH}")
    de = find(a100, "attention_backward", "flash_delta", f"B={B} T={T} C={C} NH={NH}")
    q_i = 32 * (warps * K * 874 + warps * (1417 - 874))
    kv_i = 32 * (warps * K * (911 + 688) + warps * (1570 - 911))
    expect(f"{config} --gpu a100 (no clusters): the split backward, delta {2 * N * C * A + H * T * 4} bytes, "
           f"dq {q_i / 1e9:.3f} and dk/dv {kv_i / 1e9:.3f} G instructions, 14 products",
           len(q) == L and len(kv) == L and len(de) == L
           and all(r["bytes"] == 2 * N * C * A + H * T * 4 for r in de)
           and all(rel(r["instructions"], q_i) <= 1e-12 and r["flops"] == 6 * H * T * T * HS for r in q)
           and all(rel(r["instructions"], kv_i) <= 1e-12 and r["flops"] == 8 * H * T * T * HS for r in kv)
           and not any(r["launch"] == "flash_backward_fused" for r in a100), q[:1] + kv[:1])

    # Step time and MFU from the launches.
    accum = int(summary["micro_batch"][3])
    micro_t = sum(r["time_s"] for r in micro)
    opt_t = sum(r["time_s"] for r in rows if r["phase"] == "opt")
    step = accum * micro_t + opt_t
    mfu = accum * model_flops(large, B, T, R) / step / H100_FLOPS
    expect(f"{config}: step = {accum} x micro-batch + optimizer = {step:.3f} s, MFU {100 * mfu:.1f}%",
           rel(float(summary["step_time_s"][0]), step) <= 1e-12 and rel(float(summary["mfu"][0]), mfu) <= 1e-12,
           summary)

    # Half the GEMM efficiency doubles every compute-bound GEMM's time.
    slow, _ = tsv(path, "--gemm-efficiency", "0.35")
    ok = all(rel(s["time_s"], 2 * r["time_s"]) <= 1e-12 for r, s in zip(rows, slow) if r["bound"] == "C")
    expect(f"{config}: --gemm-efficiency 0.35 doubles the compute-bound launches' times", ok)

# A vocabulary that is already a multiple of 8: no padding term.
with tempfile.TemporaryDirectory() as tmp:
    cfg = dict(large, vocab_size=30528)
    path = os.path.join(tmp, "model.json")
    json.dump(cfg, open(path, "w"))
    rows, _ = tsv(path, "--micro-batch", "4", "--seq", "64", "--predictions", "10", "--baseline")
    gemm = sum(r["flops"] for r in rows if r["phase"] != "opt")
    f = model_flops(cfg, 4, 64, 40)
    expect(f"vocab 30528 --baseline: tensor-core FLOPs = model formula exactly ({gemm:.6g} vs {f:.6g})", rel(gemm, f) <= 1e-12)

# Every backend op the engine calls appears.
called = set()
for src in ("engine/model.c", "engine/train.c", "engine/optim.c"):
    called |= set(re.findall(r"be->(\w+)\(", open(os.path.join(root, src)).read()))
called -= {"alloc", "release", "workspace_bytes", "attention_keep_row_words"}  # allocation and the memory plan are not part of a step
# The recipe trains with LAMB: the other optimizers' steps are listed under their own configs below.
called -= {"lars_step", "adamw_step"}
# The recipe's GELU is the exact one: the tanh GELU's epilogue ops are checked under a gelu_new config below.
called -= {"matmul_bias_gelu_forward", "matmul_dgelu_backward"}
rows, _ = tsv(os.path.join(configs, "bert-large-phase1.json"))
listed = {r["op"] for r in rows}
missing = sorted(called - listed)
expect(f"every backend op the engine calls is listed ({len(called)} ops: {', '.join(sorted(called))})",
       not missing and len(called) >= 20, f"missing: {missing}")

tmp = tempfile.mkdtemp()
for name in ("lars", "adamw"):
    path = os.path.join(tmp, f"{name}.json")
    with open(os.path.join(configs, "bert-large-phase1.json")) as f:
        recipe = json.load(f)
    recipe["model"] = os.path.join(configs, "bert-large.json")
    recipe["train"]["optimizer"] = name
    json.dump(recipe, open(path, "w"))
    rows, _ = tsv(path)
    expect(f"train.optimizer {name}: its step ({name}_step) is costed", f"{name}_step" in {r["op"] for r in rows})

# A tanh GELU: the FFN's bias + GELU in its GEMMs' epilogues, the streaming passes over
# [N, intermediate_size] gone; the bytes of the two epilogue GEMMs by formula (the aux
# matrix written or read beside the output, the bias read or its gradient written).
tanh_model = os.path.join(tmp, "bert-large-tanh.json")
json.dump(dict(large, hidden_act="gelu_new"), open(tanh_model, "w"))
with open(os.path.join(configs, "bert-large-phase1.json")) as f:
    recipe = json.load(f)
recipe["model"] = tanh_model
tanh_recipe = os.path.join(tmp, "tanh.json")
json.dump(recipe, open(tanh_recipe, "w"))
rows, _ = tsv(tanh_recipe)
N, C, I, A, L = 256 * 128, large["hidden_size"], large["intermediate_size"], 2, large["num_hidden_layers"]
fwd = [r for r in rows if r["launch"] == "gemm (forward, GELU_AUX_BIAS)"]
bwd = [r for r in rows if r["launch"] == "gemm (dinp, DGELU_BGRAD)"]
expect(f"gelu_new: {L} GELU_AUX_BIAS GEMMs of {N * C * A + I * C * A + 2 * N * I * A + I * A} bytes",
       len(fwd) == L and all(r["bytes"] == N * C * A + I * C * A + 2 * N * I * A + I * A for r in fwd),
       [r["bytes"] for r in fwd[:1]])
expect(f"gelu_new: {L} DGELU_BGRAD GEMMs of {C * I * A + N * C * A + 2 * N * I * A + I * A} bytes",
       len(bwd) == L and all(r["bytes"] == C * I * A + N * C * A + 2 * N * I * A + I * A for r in bwd),
       [r["bytes"] for r in bwd[:1]])
wide = [r for r in rows if r["op"].startswith("bias_gelu") and r["shape"].endswith(f"C={I}")]
expect("gelu_new: no streaming bias + GELU pass over the FFN's width", not wide, wide[:1])
# Both GELU forms summarized, the config's first; the other's step is the exact-GELU recipe's.
p = run(tanh_recipe, "--tsv")
forms = [line.split("\t")[1:] for line in p.stdout.splitlines() if line.startswith("# gelu_form\t")]
_, exact_summary = tsv(os.path.join(configs, "bert-large-phase1.json"))
expect("gelu_form lines: gelu_new then gelu, the latter's step time the exact-GELU recipe's",
       [f[0] for f in forms] == ["gelu_new", "gelu"]
       and rel(float(forms[1][2]), float(exact_summary["step_time_s"][0])) <= 1e-12
       and float(forms[0][2]) < float(forms[1][2]), forms)

# ModernBERT-base (configs/modernbert-base.json's model), 2 sequences: its layers l % 3 == 0
# global, the others a window of 64 keys each side (local_attention 128). The fused kernels at
# any length; a local layer's kernels take only the key tiles the window reaches: for the
# 64 queries from a0 the tiles holding keys a0 - 64 .. a0 + 127, so at T = 1024 the first and
# last query blocks take 2 tiles and the 14 others 3: 64 x (2 x 128 + 14 x 192) = 188,416
# (query, key) pairs of 1,048,576; at T = 512, 64 x (2 x 128 + 6 x 192) = 90,112. Up to T =
# 512 the forward writes the dropout's keep bits and the backward is the one-kernel cluster
# (a key block computes the query tiles that reach it, the same pairs); past 512 no keep bits (the record would grow as
# T^2) and the split dq and dk/dv kernels, whose dropout instances draw again: their
# instructions from budgets.tsv's REDRAW rows. Embeddings: the word table alone.
modern = json.load(open(os.path.join(configs, "modernbert-base.json")))["model"]
budgets = {}
for line in open(os.path.join(root, "kernels", "cuda", "budgets.tsv")):
    if not line.startswith("#") and line.strip() and not line.startswith("kernel\t"):
        f = line.rstrip("\n").split("\t")
        budgets[f[0]] = [int(x) for x in f[1:]]  # registers, stack, spills, shared, sass, loop1, loop2
with tempfile.TemporaryDirectory() as tmp:
    L, C, NH, A, B = modern["num_hidden_layers"], modern["hidden_size"], modern["num_attention_heads"], 2, 2
    HS, H = C // NH, B * NH
    for T, drop, pairs in ((1024, 0.0, 188416), (1024, 0.1, 188416), (512, 0.1, 90112)):
        path = os.path.join(tmp, f"modernbert-{T}-{drop}.json")
        json.dump(dict(modern, attention_dropout=drop), open(path, "w"))
        rows, summary = tsv(path, "--micro-batch", str(B), "--seq", str(T), "--predictions", "20")
        what = f"ModernBERT-base seq {T}, attention_dropout {drop}"
        N, K, warps = B * T, T // 64, H * T // 16
        per_layer = [T * T if l % 3 == 0 else pairs for l in range(L)]
        fw = [r for r in rows if r["launch"] == "flash_forward"]
        keep = H * T * ((T + 63) // 64 * 2) * 4 if drop and T <= 512 else 0  # 2 words per 64 keys
        fw_b = 4 * N * C * A + H * T * 4 + N * 4 + keep
        expect(f"{what}: {L} flash_forward launches, FLOPs 4 H HS x pairs (T^2 global, {pairs} local), "
               f"{fw_b} bytes ({keep} of keep bits)",
               len(fw) == L and [r["flops"] for r in fw] == [4 * H * p * HS for p in per_layer]
               and all(r["bytes"] == fw_b for r in fw), [(r["flops"], r["bytes"]) for r in fw[:2]])
        if T <= 512:
            bw = [r for r in rows if r["launch"] == "flash_backward_fused"]
            expect(f"{what}: the one-kernel backward, {L} launches of 10 H HS x pairs FLOPs (T^2 global, {pairs} "
                   "local: a key block skips the query tiles its window does not reach)",
                   len(bw) == L and [r["flops"] for r in bw] == [10 * H * p * HS for p in per_layer], bw[:1])
        else:
            q = [r for r in rows if r["launch"] == "flash_backward_q"]
            kv = [r for r in rows if r["launch"] == "flash_backward_kv"]
            redraw = "true" if drop else "false"
            instr = []
            for l in range(L):
                win = "false" if l % 3 == 0 else "true"
                bq = budgets[f"flash_backward_q_kernel<__half, {HS}, {win}, {redraw}>"]
                tiles = warps * per_layer[l] / (T * 64)  # warp-tiles: 16 queries x 64 keys each
                instr.append(32 * (tiles * bq[5] + warps * (bq[4] - bq[5])))
            expect(f"{what}: split backward on the H100 ({L} dq, {L} dk/dv, no fused kernel), FLOPs 6 and 8 H HS x "
                   f"pairs, dq instructions from budgets.tsv's rows with REDRAW = {redraw}",
                   len(q) == L and len(kv) == L and not any(r["launch"] == "flash_backward_fused" for r in rows)
                   and [r["flops"] for r in q] == [6 * H * p * HS for p in per_layer]
                   and [r["flops"] for r in kv] == [8 * H * p * HS for p in per_layer]
                   and all(rel(r["instructions"], i) <= 1e-12 for r, i in zip(q, instr)),
                   [(r["flops"], r["instructions"]) for r in q[:2]] + instr[:2])
        emb = [r for r in rows if r["op"] == "embeddings_forward"]
        emb_b = [r for r in rows if r["op"] == "embeddings_backward"]
        expect(f"{what}: embeddings read the word rows and ids only (2 N C A + 4 N bytes); the backward scatters "
               "the word rows alone",
               len(emb) == 1 and emb[0]["bytes"] == 2 * N * C * A + 4 * N
               and [r["launch"] for r in emb_b] == ["scatter_pieces (word)"], emb + emb_b)
        expect(f"{what}: RoPE and GeGLU priced, {L} launches each way",
               all(sum(r["op"] == op for r in rows) == L
                   for op in ("rope_forward", "rope_backward", "geglu_forward", "geglu_backward")))

p = run(os.path.join(configs, "bert-large.json"), "--gpu", "v100")
expect("--gpu v100: exit 1 naming the value and the choices",
       p.returncode == 1 and "'v100'" in p.stderr and "h100" in p.stderr, p.stderr)
p = run(os.path.join(configs, "bert-large.json"), "--seq", "1024")
expect("--seq 1024 beyond max_position_embeddings: exit 1 naming both",
       p.returncode == 1 and "1024" in p.stderr and "max_position_embeddings = 512" in p.stderr, p.stderr)
p = run(os.path.join(configs, "bert-large.json"), "--gpu", "a100", "--by-kernel")
expect("--by-kernel on the A100: summary lines with step time and MFU",
       p.returncode == 0 and "A100" in p.stdout and "MFU" in p.stdout, p.stderr)

sys.exit(checks.exit_status())
