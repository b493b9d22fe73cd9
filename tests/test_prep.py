"""`bertpre prep` read back by h5py (the reference reader): dataset names, dtypes, shapes
and compression of NVIDIA's layout; masked-LM statistics (15% +-1%, 80/10/10 +-2%), [CLS]
and [SEP] never masked, NSP labels ~50%, sequence structure, balanced shards; the same
bytes for 1 or 2 threads, and the union of 2 ranks' shards equal to 1 rank's; both input
formats; a shard written by h5py the way NVIDIA's script writes it loads exactly as ours;
and `bertpre train` on the shards (loss, eval, vocabulary and shape errors).
usage: test_prep.py BERTPRE DUMP"""
import glob
import os
import re
import subprocess
import sys
import tempfile

from data_fixtures import Checks, linux_doc, real_lines, require, run, train_tokenizer

bertpre, dump = sys.argv[1], sys.argv[2]
require(bertpre, "hdf5", "sentencepiece")
import h5py  # noqa: E402  (Debian's python3-h5py; after the skip checks)
import numpy as np  # noqa: E402

CLS, SEP, MASK = 2, 3, 4
S, P = 64, 10
c = Checks()
corpus = os.path.join(linux_doc(), "networking")
NAMES = {"input_ids": "int32", "input_mask": "int8", "segment_ids": "int8", "masked_lm_positions": "int32",
         "masked_lm_ids": "int32", "next_sentence_labels": "int8"}


def prep(out, *extra, env=None, inputs=(corpus,)):
    cmd = [bertpre, "prep", "--tokenizer", model, "--output", out, "--format", "text", "--pattern", "*.rst.gz",
           "--seq-length", S, "--max-predictions", P, "--no-progress", *extra, *inputs]
    p = subprocess.run([str(x) for x in cmd], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        sys.exit(1)
    return p.stdout


def load(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}


def concat(paths):
    parts = [load(p) for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


with tempfile.TemporaryDirectory() as tmp:
    model = train_tokenizer(bertpre, os.path.join(tmp, "spm"), [corpus], 2000)
    a = os.path.join(tmp, "a")
    out = prep(a, "--threads", 2, "--shards", 3, "--eval-fraction", 0.05)
    print(out.strip())
    train = sorted(glob.glob(os.path.join(a, "train-*.hdf5")))
    c.expect("3 train shards and one eval shard written",
             len(train) == 3 and os.path.exists(os.path.join(a, "eval-00000.hdf5")))

    with h5py.File(train[0], "r") as f:
        c.expect("h5py sees exactly the six datasets", set(f.keys()) == set(NAMES), str(sorted(f.keys())))
        c.expect("dtypes i4/i1 as in NVIDIA's layout", all(str(f[k].dtype) == t for k, t in NAMES.items()),
                 str({k: str(f[k].dtype) for k in f}))
        n = f["input_ids"].shape[0]
        shapes_ok = all(f[k].shape == (n, S) for k in ("input_ids", "input_mask", "segment_ids")) and \
            all(f[k].shape == (n, P) for k in ("masked_lm_positions", "masked_lm_ids")) and \
            f["next_sentence_labels"].shape == (n,)
        c.expect(f"shapes [N,{S}] x3, [N,{P}] x2, [N]", shapes_ok)
        c.expect("gzip compression", all(f[k].compression == "gzip" for k in f))
    sizes = [load(p)["input_ids"].shape[0] for p in train]
    c.expect("shard sizes differ by at most one", max(sizes) - min(sizes) <= 1, str(sizes))

    d = concat(train)
    ids, mask, seg = d["input_ids"], d["input_mask"].astype(bool), d["segment_ids"]
    pos, lab, nsp = d["masked_lm_positions"], d["masked_lm_ids"], d["next_sentence_labels"]
    N = ids.shape[0]
    valid = pos > 0
    rows, slots = np.nonzero(valid)
    at = ids[rows, pos[rows, slots]]
    orig = lab[rows, slots]
    rate = valid.sum() / mask.sum()
    share_mask, share_kept = (at == MASK).mean(), (at == orig).mean()
    share_random = 1 - share_mask - share_kept
    print(f"     {N} instances: {rate:.4f} of tokens masked; [MASK] {share_mask:.3f}, kept {share_kept:.3f}, "
          f"random {share_random:.3f}; NSP random-next {nsp.mean():.3f}")
    # Tolerances from the issue; sampling error over ~100k masked positions is ~0.1%.
    c.expect("15% +-1% of the real tokens are masked", abs(rate - 0.15) <= 0.01, f"{rate:.4f}")
    c.expect("80/10/10 +-2%", abs(share_mask - 0.8) <= 0.02 and abs(share_kept - 0.1) <= 0.02 and
             abs(share_random - 0.1) <= 0.02)
    restored = ids.copy()
    restored[rows, pos[rows, slots]] = orig
    c.expect("[CLS]/[SEP] never masked (labels and positions)",
             not np.isin(orig, [CLS, SEP]).any() and not np.isin(ids[rows, pos[rows, slots]], [CLS, SEP]).any())
    c.expect("NSP labels ~50% (+-3%)", abs(nsp.mean() - 0.5) <= 0.03, f"{nsp.mean():.3f}")
    lengths = mask.sum(1)
    structure = all([
        (mask == (np.arange(S)[None, :] < lengths[:, None])).all(),          # mask is a prefix
        (restored[:, 0] == CLS).all(),
        (restored[np.arange(N), lengths - 1] == SEP).all(),
        ((restored == SEP) & mask).sum(1).tolist() == [2] * N,               # [CLS] A [SEP] B [SEP]
        (ids[~mask] == 0).all() and (seg[~mask] == 0).all(),
        (np.diff(np.where(valid, pos, (1 << 30) + np.arange(P)), axis=1) > 0).all(),  # ascending, then zero
        (valid[:, 1:] <= valid[:, :-1]).all(),
    ])
    first_sep = np.argmax(restored == SEP, axis=1)
    seg_ok = all((seg[i, :first_sep[i] + 1] == 0).all() and (seg[i, first_sep[i] + 1:lengths[i]] == 1).all()
                 for i in range(0, N, 97))
    c.expect("sequences are [CLS] A [SEP] B [SEP] with segments 0/1, prefix masks, zero padding", structure and seg_ok)
    c.expect("some sequences are short (short_seq_prob 0.1) and most are full",
             0.02 < (lengths < S - 8).mean() < 0.5 and (lengths >= S - 3).mean() > 0.5)

    b = os.path.join(tmp, "b")
    prep(b, "--threads", 1, "--shards", 3, "--eval-fraction", 0.05)
    same = all(all(np.array_equal(load(x)[k], load(y)[k]) for k in NAMES)
               for x, y in zip(sorted(glob.glob(a + "/*.hdf5")), sorted(glob.glob(b + "/*.hdf5"))))
    c.expect("deterministic: 1 thread writes what 2 threads wrote", same)
    # The shards' deflate through zlib (BERTPRE_DEFLATE=zlib) and through the default
    # compressor (libdeflate where built in): other compressed bytes, the same contents for
    # h5py, still HDF5's gzip filter at the level asked for.
    z = os.path.join(tmp, "zlib")
    prep(z, "--threads", 1, "--shards", 3, "--eval-fraction", 0.05, env=dict(os.environ, BERTPRE_DEFLATE="zlib"))
    pairs = list(zip(sorted(glob.glob(b + "/*.hdf5")), sorted(glob.glob(z + "/*.hdf5"))))
    same = len(pairs) == 4 and all(all(np.array_equal(load(x)[k], load(y)[k]) for k in NAMES) for x, y in pairs)
    with h5py.File(pairs[0][0], "r") as f, h5py.File(pairs[0][1], "r") as g:
        gzip4 = all((f[k].compression, f[k].compression_opts, g[k].compression, g[k].compression_opts) ==
                    ("gzip", 4, "gzip", 4) for k in NAMES)
    c.expect("the shards gzipped by zlib and by the default compressor hold the same rows, gzip level 4 in both",
             same and gzip4)
    p = subprocess.run([bertpre, "prep", "--tokenizer", model, "--output", os.path.join(tmp, "badz"), corpus],
                       capture_output=True, text=True, env=dict(os.environ, BERTPRE_DEFLATE="zip"))
    c.expect("BERTPRE_DEFLATE=zip is refused, naming the variable and value, before any shard is written",
             p.returncode != 0 and "BERTPRE_DEFLATE='zip'" in p.stderr and
             not (os.path.isdir(os.path.join(tmp, "badz")) and  # the directory's lock file aside
                  set(os.listdir(os.path.join(tmp, "badz"))) - {".bertpre-prep-lock"}), p.stderr.strip())
    s2 = os.path.join(tmp, "seed2")
    prep(s2, "--seed", 7, "--shards", 3)
    c.expect("another seed gives other instances", not np.array_equal(load(s2 + "/train-00000.hdf5")["input_ids"],
                                                                      load(train[0])["input_ids"]))

    ranks = os.path.join(tmp, "ranks")
    for r in range(2):
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2")
        prep(ranks, "--shards", 2, "--eval-fraction", 0.05, "--chunk-mb", 0.3, env=env)
    one = os.path.join(tmp, "one")
    prep(one, "--shards", 2, "--eval-fraction", 0.05, "--chunk-mb", 0.3)
    names = sorted(os.path.basename(p) for p in glob.glob(ranks + "/*.hdf5"))

    def rowset(paths):
        x = concat(paths)
        return sorted(map(bytes, np.concatenate([x["input_ids"], x["masked_lm_positions"]], axis=1)))
    c.expect("2 ranks under mpirun write their own files (train-00000..3, eval-00000..1)",
             names == ["eval-00000.hdf5", "eval-00001.hdf5"] + [f"train-{i:05d}.hdf5" for i in range(4)], str(names))
    c.expect("the union of 2 ranks' instances equals 1 rank's",
             rowset(glob.glob(ranks + "/train-*")) == rowset(glob.glob(one + "/train-*")) and
             rowset(glob.glob(ranks + "/eval-*")) == rowset(glob.glob(one + "/eval-*")))

    # Input format (a): a sentence per line, blank lines between documents.
    lines = real_lines(300_000)
    docs = [lines[i:i + 40] for i in range(0, len(lines), 40)]
    lines_file = os.path.join(tmp, "sentences.txt")
    with open(lines_file, "w") as f:
        f.write("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    out = prep(os.path.join(tmp, "fmt_a"), "--format", "lines", inputs=[lines_file])
    got = int(re.search(r"(\d+) documents", out).group(1))
    c.expect(f"format lines: {len(docs)} blank-line separated documents read", got == len(docs), out.strip())
    out = prep(os.path.join(tmp, "fmt_b"), "--doc-per", "block", inputs=[corpus])
    got_blocks = int(re.search(r"(\d+) documents", out).group(1))
    c.expect("format text, a document per blank-line block: more documents than files",
             got_blocks > 2000, out.strip())

    # NVIDIA's layout written by h5py (create_dataset with gzip, h5py's own chunking, i4
    # input_mask in some of their versions) loads exactly as ours.
    nv = os.path.join(tmp, "nvidia.hdf5")
    src = load(train[0])
    with h5py.File(nv, "w") as f:
        for k, v in src.items():
            dtype = "i4" if k in ("input_ids", "masked_lm_positions", "masked_lm_ids", "input_mask") else "i1"
            f.create_dataset(k, data=v, dtype=dtype, compression="gzip")
    n0 = src["input_ids"].shape[0]
    for shuffle in ("0", "1"):
        ours = run([dump, "loader", train[0], 16, 2000, n0 // 16, shuffle]).stdout
        theirs = run([dump, "loader", nv, 16, 2000, n0 // 16, shuffle]).stdout
        c.expect(f"a shard in NVIDIA's layout written by h5py loads identically (shuffle {shuffle})",
                 ours == theirs and len(ours) > 0)
    ours_in_order = run([dump, "loader", train[0], 16, 2000, 2, "0"]).stdout.splitlines()
    ref_rows = [" | ".join(" ".join(str(int(v)) for v in np.atleast_1d(src[k][i])) for k in
                           ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                            "next_sentence_labels")) for i in range(32)]
    c.expect("the loader's rows equal h5py's rows (file order)", ours_in_order == ref_rows)

    # Training on the shards.
    common = ["--set", "train.seq_length=64", "--set", "train.max_predictions_per_seq=10", "--set",
              "train.micro_batch_size=8", "--set", "train.steps=4", "--set", "train.log_every=2", "--set",
              f"train.data={a}/train-*.hdf5", "--set", f"train.tokenizer={model}"]
    p = run([bertpre, "train", "configs/demo-tiny.json", "--set", "model.vocab_size=2000", "--set",
             f"train.eval_data={a}/eval-00000.hdf5", "--set", "train.eval_batches=2", "--set",
             "train.dynamic_masking=1", *common], check=False)
    c.expect("bertpre train on the shards prints loss, MLM accuracy and an eval line",
             p.returncode == 0 and "mlm loss" in p.stdout and "mlm acc" in p.stdout and "eval |" in p.stdout,
             (p.stdout + p.stderr).strip()[-400:])
    p = run([bertpre, "train", "configs/demo-tiny.json", "--set", "model.vocab_size=1000", *common], check=False)
    c.expect("a tokenizer larger than the model's vocab_size: an error naming both",
             p.returncode == 1 and "2000" in p.stderr and "vocab_size = 1000" in p.stderr, p.stderr.strip())
    p = run([bertpre, "train", "configs/demo-tiny.json", "--set", "model.vocab_size=2000", *common, "--set",
             "train.seq_length=32"], check=False)
    c.expect("shards of another sequence length: an error naming the file and dataset",
             p.returncode == 1 and "train-00000.hdf5" in p.stderr and "input_ids" in p.stderr, p.stderr.strip())
c.finish()
