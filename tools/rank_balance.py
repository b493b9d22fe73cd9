#!/usr/bin/env python3
"""Real tokens per rank and step when micro-batches are unpadded: how unevenly the loader's
partition of the samples spreads them over the ranks, and what balancing would gain
(docs/SCALING.md, "Unpadded micro-batches across ranks").

The partition is data/loader.c's, reproduced here: the samples of all shards (sorted file
order; a directory's eval-* shards left out, as `bertpre train` does) cut into blocks of 256
rows per shard; each epoch permutes the blocks and the rows inside each block (Philox4x32-10
keyed by seed and epoch, Fisher-Yates as in loader.c); rank r of W takes the slice
[r N / W, (r + 1) N / W) of that order, and its micro-batches run through its slices epoch
after epoch. A row's length is the number of ones in its input_mask.

For each rank count W and each step (accumulation = global batch / (W x micro-batch)
micro-batches per rank), the real tokens of each rank's step; printed per step: max / mean
over the ranks as the loader deals them, after a padding exchange (the step's samples
re-dealt to the ranks, each keeping its sample count, longest first to the rank with the
fewest tokens), and with a loader that deals whole 256-row groups by tokens (the same
greedy deal over the step's groups of 256 consecutive samples of each rank's stream).

usage:
  tools/rank_balance.py SHARDS --micro-batch B --global-batch G --ranks 8,64 [--seed 42] [--steps N]
  tools/rank_balance.py SHARDS --order-of RANK WORLD --micro-batch B --batches K [--seed S]
      (the lengths of the first K micro-batches of one rank, one line per micro-batch: for the
      test that checks this partition against the loader)
  tools/rank_balance.py SHARDS --histogram FILE   (the lengths as `bench model --length-histogram` reads them)
"""
import argparse
import glob
import os
import sys

import common

common.need("rank_balance", "numpy", "h5py")
import numpy as np  # noqa: E402

BLOCK = 256                     # LOADER_BLOCK
SITE_BLOCK_ORDER = 0xFFFFFFF0   # loader.c's key of the block order
M32 = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on arrays of counters (uint64 holding 32-bit words), as kernels/common/philox.h."""
    M0, M1, W0, W1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), 0x9E3779B9, 0xBB67AE85
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & M32 for c in (c0, c1, c2, c3))
    for _ in range(10):
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & M32, (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), \
            p0 & M32
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def draws(seed, step, site, counter):
    """philox_draw(seed, step, site, counter) for arrays of site and counter (rng_next's sequence)."""
    counter = np.asarray(counter, dtype=np.uint64)
    group = counter >> np.uint64(2)
    v = philox(group & M32, site, np.full(counter.shape, step, np.uint64), group >> np.uint64(32), seed & 0xFFFFFFFF,
               seed >> 32)
    lane = (counter & np.uint64(3)).astype(np.int64)
    return np.choose(lane, v)


def fisher_yates(n_list, seed, step, sites):
    """The permutations loader.c draws: for each (n, site), i from n-1 down to 1 swaps i with
    rng_range(0, i) of the stream (seed, step, site), two 32-bit draws per range."""
    total = sum(max(n - 1, 0) for n in n_list)
    site_arr = np.empty(total, np.uint64)
    k_arr = np.empty(total, np.uint64)
    span = np.empty(total, np.uint64)
    at = 0
    for n, site in zip(n_list, sites):
        m = max(n - 1, 0)
        site_arr[at:at + m] = site
        k_arr[at:at + m] = np.arange(m, dtype=np.uint64)
        span[at:at + m] = np.arange(n, 1, -1, dtype=np.uint64)  # i + 1 for i = n-1 .. 1
        at += m
    hi = draws(seed, step, site_arr, 2 * k_arr)
    lo = draws(seed, step, site_arr, 2 * k_arr + np.uint64(1))
    j_all = (((hi << np.uint64(32)) | lo) % span).astype(np.int64).tolist()
    perms, at = [], 0
    for n in n_list:
        p = list(range(n))
        for k, i in enumerate(range(n - 1, 0, -1)):
            j = j_all[at + k]
            p[i], p[j] = p[j], p[i]
        at += max(n - 1, 0)
        perms.append(p)
    return perms


def shard_paths(spec, skip_heldout=True):
    """loader.c's expand_spec: comma-separated files, directories (their *.hdf5 and *.h5) or
    globs, each entry's files sorted."""
    paths = []
    for item in spec.split(","):
        if os.path.isdir(item):
            names = [n for n in os.listdir(item) if (n.endswith(".hdf5") or n.endswith(".h5")) and n[0] != "."
                     and not (skip_heldout and n.startswith("eval-"))]
            found = [os.path.join(item, n) for n in names]
        elif os.path.exists(item):
            found = [item]
        else:
            found = glob.glob(item)
        if not found:
            sys.exit(f"rank_balance: {item}: no shard file, directory or matching files")
        paths += sorted(found)
    return paths


def shard_lengths(spec):
    """Per shard: the length (ones of input_mask) of every row."""
    import h5py
    out = []
    for p in shard_paths(spec):
        with h5py.File(p, "r") as f:
            out.append((f["input_mask"][:] != 0).sum(axis=1).astype(np.int64))
    return out


class Partition:
    """The loader's order of samples per epoch and each rank's slice of it."""

    def __init__(self, per_shard, seed):
        self.lengths = np.concatenate(per_shard)
        self.seed = seed
        self.blocks = []  # (global first sample, count)
        offset = 0
        for lens in per_shard:
            for first in range(0, len(lens), BLOCK):
                self.blocks.append((offset + first, min(BLOCK, len(lens) - first)))
            offset += len(lens)
        self.N = offset
        self.cache = {}

    def order(self, epoch):
        """Global sample indices in epoch `epoch`'s order (kept: every rank reads every epoch)."""
        if epoch not in self.cache:
            nb = len(self.blocks)
            block_order = fisher_yates([nb], self.seed, epoch, [SITE_BLOCK_ORDER])[0]
            rows = fisher_yates([c for _, c in self.blocks], self.seed, epoch, list(range(nb)))
            self.cache[epoch] = np.concatenate([self.blocks[b][0] + np.asarray(rows[b], np.int64)
                                                for b in block_order])
        return self.cache[epoch]

    def rank_stream(self, rank, world, count):
        """The first `count` samples rank `rank` of `world` consumes (its slices, epoch after epoch)."""
        lo, hi = self.N * rank // world, self.N * (rank + 1) // world
        parts, have, epoch = [], 0, 0
        while have < count:
            parts.append(self.order(epoch)[lo:hi])
            have += hi - lo
            epoch += 1
        return np.concatenate(parts)[:count]


def greedy_deal(items, ranks, per_rank):
    """Deals items (token counts) to `ranks` ranks, `per_rank` each: longest first, each to the
    rank with the fewest tokens that still has room. Returns the ranks' token totals."""
    totals = np.zeros(ranks)
    room = np.full(ranks, per_rank)
    for v in sorted(items, reverse=True):
        open_ranks = np.flatnonzero(room > 0)
        r = open_ranks[np.argmin(totals[open_ranks])]
        totals[r] += v
        room[r] -= 1
    return totals


def measure(part, micro, global_batch, world, steps):
    """Per step, max/mean of the ranks' real tokens: as dealt, after a padding exchange, with
    256-row groups dealt by tokens; and per micro-batch (same index on every rank)."""
    if global_batch % (micro * world):
        sys.exit(f"rank_balance: global batch {global_batch} is not a multiple of {micro} x {world} ranks")
    accum = global_batch // (micro * world)
    per_rank = micro * accum
    L = part.lengths
    streams = np.stack([L[part.rank_stream(r, world, steps * per_rank)] for r in range(world)])  # [W, steps*per_rank]
    steps_tokens = streams.reshape(world, steps, per_rank)
    tokens = steps_tokens.sum(axis=2)  # [W, steps]
    dealt = tokens.max(axis=0) / tokens.mean(axis=0)
    micro_tokens = streams.reshape(world, steps * accum, micro).sum(axis=2)
    micro_ratio = micro_tokens.max(axis=0) / micro_tokens.mean(axis=0)
    exchange, groups = [], []
    group = min(BLOCK, per_rank)
    for s in range(steps):
        samples = steps_tokens[:, s, :]
        t = greedy_deal(samples.ravel(), world, per_rank)
        exchange.append(t.max() / t.mean())
        g = samples.reshape(world, per_rank // group, group).sum(axis=2).ravel()
        t = greedy_deal(g, world, per_rank // group)
        groups.append(t.max() / t.mean())
    return {"accum": accum, "per_rank": per_rank, "mean_tokens": tokens.mean(), "dealt": dealt,
            "micro": micro_ratio, "exchange": np.array(exchange), "groups": np.array(groups)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shards")
    ap.add_argument("--micro-batch", type=int)
    ap.add_argument("--global-batch", type=int)
    ap.add_argument("--ranks", default="8,64")
    ap.add_argument("--seed", type=int, default=42, help="train.seed (the recipes': 42)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--order-of", nargs=2, type=int, metavar=("RANK", "WORLD"))
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--histogram")
    a = ap.parse_args()
    if not a.histogram and (not a.micro_batch or (not a.order_of and not a.global_batch)):
        ap.error("--micro-batch and --global-batch (or --order-of with --micro-batch) are required")
    per_shard = shard_lengths(a.shards)
    if a.histogram:
        lens = np.concatenate(per_shard)
        values, counts = np.unique(lens, return_counts=True)
        with open(a.histogram, "w") as f:
            f.write(f"# lengths (ones of input_mask) of {len(lens)} rows of {a.shards}: LENGTH COUNT\n")
            for v, c in zip(values, counts):
                f.write(f"{v} {c}\n")
        return
    part = Partition(per_shard, a.seed)
    if a.order_of:
        rank, world = a.order_of
        s = part.lengths[part.rank_stream(rank, world, a.batches * a.micro_batch)]
        for b in range(a.batches):
            print(" ".join(str(v) for v in s[b * a.micro_batch:(b + 1) * a.micro_batch]))
        return
    import h5py
    with h5py.File(shard_paths(a.shards)[0], "r") as f:
        T = f["input_mask"].shape[1]
    print(f"{part.N} samples of seq {T}, mean length {part.lengths.mean():.2f} "
          f"(real-token fraction {part.lengths.mean() / T:.4f}); micro-batch {a.micro_batch}, "
          f"global batch {a.global_batch}, seed {a.seed}, {a.steps} steps")
    print("ranks | accumulation | samples per rank-step | real tokens per rank-step (mean) | max/mean per rank-step: "
          "mean, worst | per micro-batch: mean, worst | after a padding exchange: mean, worst | "
          "256-row groups dealt by tokens: mean, worst")
    for w in (int(x) for x in a.ranks.split(",")):
        m = measure(part, a.micro_batch, a.global_batch, w, a.steps)
        print(f"{w} | {m['accum']} | {m['per_rank']} | {m['mean_tokens']:.0f} | {m['dealt'].mean():.4f}, "
              f"{m['dealt'].max():.4f} | {m['micro'].mean():.4f}, {m['micro'].max():.4f} | "
              f"{m['exchange'].mean():.5f}, {m['exchange'].max():.5f} | {m['groups'].mean():.4f}, "
              f"{m['groups'].max():.4f}")


if __name__ == "__main__":
    main()
