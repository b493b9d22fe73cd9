"""tools/rank_balance.py: its reproduction of the loader's partition (data/loader.c) against
the loader itself, and its balancing arithmetic against cases whose answer is known.

- Partition: three shards written by h5py (300, 77 and 530 rows: full and partial blocks of
  256) with random lengths; for 1 and 3 ranks, seeds 11 (`dump loader`'s), micro-batches of 16
  over more than two epochs: the lengths of every micro-batch the script predicts equal the
  input_mask lengths of the rows `dump loader` delivers, row for row (exact integers).
- Balancing: every row of one length gives max/mean 1 everywhere; the greedy deal of
  [5, 4, 3, 3, 2, 1] over two ranks of three gives 9 and 9; a padding exchange never leaves
  a step more uneven than the loader's deal.

usage: test_rank_balance.py DUMP SOURCE_ROOT BERTPRE (whose --version says what the build has)
"""
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import require

dump, root, bertpre = sys.argv[1], sys.argv[2], sys.argv[3]
require(bertpre, "hdf5")
sys.path.insert(0, os.path.join(root, "tools"))
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import rank_balance  # noqa: E402

T, P, B = 32, 5, 16
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(3)
for k, n in enumerate((300, 77, 530)):
    lens = rng.integers(2, T + 1, n)
    mask = (np.arange(T)[None, :] < lens[:, None]).astype("i1")
    with h5py.File(os.path.join(tmp, f"train-{k}.hdf5"), "w") as f:
        f.create_dataset("input_ids", data=np.where(mask, 7, 0).astype("i4"))
        f.create_dataset("input_mask", data=mask)
        f.create_dataset("segment_ids", data=np.zeros((n, T), "i1"))
        f.create_dataset("masked_lm_positions", data=np.zeros((n, P), "i4"))
        f.create_dataset("masked_lm_ids", data=np.zeros((n, P), "i4"))
        f.create_dataset("next_sentence_labels", data=np.zeros(n, "i1"))

part = rank_balance.Partition(rank_balance.shard_lengths(tmp), 11)
for world in (1, 3):
    batches = 2 * 907 // (world * B) + 5  # past the end of the second epoch
    for rank in range(world):
        out = subprocess.run([dump, "loader", tmp, str(B), "100", str(batches), "1", str(rank), str(world)],
                             capture_output=True, text=True)
        got = [sum(int(v) for v in line.split(" | ")[1].split()) for line in out.stdout.splitlines()]
        want = part.lengths[part.rank_stream(rank, world, batches * B)].tolist()
        expect(f"rank {rank} of {world}: {batches} micro-batches of {B} ({len(got)} rows, 3 epochs): the loader's "
               "lengths, row for row", out.returncode == 0 and got == want, out.stderr or (got[:20], want[:20]))

same = rank_balance.Partition([np.full(1000, 20)], 42)
m = rank_balance.measure(same, 8, 64, 4, 5)
expect("every row of length 20: max/mean 1 as dealt, per micro-batch, after an exchange and by groups",
       all(np.all(np.abs(m[k] - 1) < 1e-12) for k in ("dealt", "micro", "exchange", "groups")))
t = rank_balance.greedy_deal([5, 4, 3, 3, 2, 1], 2, 3)
expect(f"greedy deal of 5 4 3 3 2 1 over two ranks of three: {sorted(t.tolist())} = [9, 9]",
       sorted(t.tolist()) == [9.0, 9.0])
m = rank_balance.measure(part, 16, 96, 3, 6)
expect(f"random lengths, 3 ranks: the exchange ({m['exchange'].max():.4f}) never worse than the deal "
       f"({m['dealt'].min():.4f}..{m['dealt'].max():.4f}), step by step", np.all(m["exchange"] <= m["dealt"] + 1e-12))
sys.exit(checks.exit_status())
