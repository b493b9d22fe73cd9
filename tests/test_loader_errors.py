"""Bad shards, written with h5py, each stopped by the loader with a non-zero exit and an
error that names the file, the dataset and (where there is one) the row.
usage: test_loader_errors.py DUMP CASE BERTPRE (whose --version says what the build has)
CASE: corrupt | truncated | mismatched | values"""
import os
import shutil
import subprocess
import sys
import tempfile

from data_fixtures import Checks, require

dump, case, bertpre = sys.argv[1], sys.argv[2], sys.argv[3]
require(bertpre, "hdf5")
import h5py  # noqa: E402
import numpy as np  # noqa: E402

N, S, P, VOCAB = 600, 16, 3, 1000
c = Checks()


def make_arrays(seed):
    g = np.random.default_rng(seed)
    ids = g.integers(5, VOCAB, size=(N, S))
    ids[:, 0], ids[:, S // 2], ids[:, S - 1] = 2, 3, 3
    pos = np.sort(g.choice(np.arange(1, S // 2), size=(N, P)), axis=1)
    pos[:, 1] = pos[:, 0] + 1
    pos[:, 2] = 0
    return {"input_ids": ids, "input_mask": np.ones((N, S)), "segment_ids": (np.arange(S) > S // 2)[None].repeat(N, 0),
            "masked_lm_positions": pos, "masked_lm_ids": g.integers(5, VOCAB, size=(N, P)) * (pos > 0),
            "next_sentence_labels": g.integers(0, 2, size=N)}


def document_starts():
    """The optional dataset: 4 columns, rows of one, two or three documents (0, then ascending starts
    among the 16 real tokens, then zeros)."""
    starts = np.zeros((N, 4), dtype=np.int64)
    starts[1::2, 1] = 4
    starts[1::4, 2] = 11
    return starts


def write(path, arrays, dtypes=None):
    types = {"input_ids": "i4", "input_mask": "i1", "segment_ids": "i1", "masked_lm_positions": "i4",
             "masked_lm_ids": "i4", "next_sentence_labels": "i1", "document_starts": "i4"}
    types.update(dtypes or {})
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f.create_dataset(k, data=v, dtype=types[k], compression="gzip", chunks=(64,) + v.shape[1:])
    return path


def load(spec):
    return subprocess.run([dump, "loader", spec, "4", str(VOCAB), "1", "1"], capture_output=True, text=True)


def expect_error(what, spec, *needles):
    p = load(spec)
    err = p.stderr.strip()
    ok = p.returncode == 1 and all(n in err for n in needles)
    c.expect(f"{what}: exit 1, error names {', '.join(repr(n) for n in needles)}", ok, err or p.stdout[:200])


with tempfile.TemporaryDirectory() as tmp:
    good = write(os.path.join(tmp, "good.hdf5"), make_arrays(1))
    p = load(good)
    c.expect("a valid shard written by h5py loads", p.returncode == 0 and p.stdout.count("\n") == 4, p.stderr)

    if case == "corrupt":
        bad = os.path.join(tmp, "corrupt.hdf5")
        shutil.copy(good, bad)
        with h5py.File(bad, "r") as f:
            info = f["input_ids"].id.get_chunk_info(3)  # rows 192..255
        with open(bad, "r+b") as f:
            f.seek(info.byte_offset + info.size // 3)
            f.write(bytes(range(7, 7 + 64)))
        expect_error("gzip chunk of input_ids overwritten", bad, bad, "'input_ids'", "row 192")
    elif case == "truncated":
        bad = os.path.join(tmp, "truncated.hdf5")
        with open(good, "rb") as src, open(bad, "wb") as dst:
            dst.write(src.read(os.path.getsize(good) * 6 // 10))
        expect_error("file cut to 60% of its size", bad, bad, "truncated")
        empty = os.path.join(tmp, "empty.hdf5")
        open(empty, "wb").close()
        expect_error("empty file", empty, empty, "HDF5")
    elif case == "mismatched":
        arrays = make_arrays(2)
        short = dict(arrays, segment_ids=arrays["segment_ids"][:-1])
        expect_error("segment_ids one row short", write(os.path.join(tmp, "rows.hdf5"), short),
                     "rows.hdf5", "'segment_ids'", f"{N - 1} rows", f"{N}")
        narrow = dict(arrays, input_mask=arrays["input_mask"][:, :-1])
        expect_error("input_mask one column short", write(os.path.join(tmp, "cols.hdf5"), narrow),
                     "cols.hdf5", "'input_mask'", f"{S - 1} columns")
        expect_error("masked_lm_ids stored as float", write(os.path.join(tmp, "float.hdf5"), arrays,
                                                            {"masked_lm_ids": "f4"}),
                     "float.hdf5", "'masked_lm_ids'", "non-integer")
        missing = os.path.join(tmp, "missing.hdf5")
        write(missing, {k: v for k, v in arrays.items() if k != "next_sentence_labels"})
        expect_error("next_sentence_labels missing", missing, "missing.hdf5", "'next_sentence_labels'", "missing")
        other_p = dict(arrays, masked_lm_positions=np.pad(arrays["masked_lm_positions"], ((0, 0), (0, 1))),
                       masked_lm_ids=np.pad(arrays["masked_lm_ids"], ((0, 0), (0, 1))))
        pshard = write(os.path.join(tmp, "p4.hdf5"), other_p)
        expect_error("a second shard with another max_predictions", f"{good},{pshard}", "p4.hdf5",
                     "'masked_lm_positions'", "4 columns")
        # The optional document_starts: its rows, width (1 to S), dtype and rank are checked.
        starts = document_starts()
        expect_error("document_starts one row short", write(os.path.join(tmp, "drows.hdf5"),
                                                            dict(arrays, document_starts=starts[:-1])),
                     "drows.hdf5", "'document_starts'", f"{N - 1} rows", f"{N}")
        expect_error("document_starts of S + 1 columns", write(os.path.join(tmp, "dwide.hdf5"),
                                                               dict(arrays, document_starts=np.zeros((N, S + 1)))),
                     "dwide.hdf5", "'document_starts'", f"{S + 1} columns", f"1 to {S}")
        expect_error("document_starts stored as float", write(os.path.join(tmp, "dfloat.hdf5"),
                                                              dict(arrays, document_starts=starts),
                                                              {"document_starts": "f4"}),
                     "dfloat.hdf5", "'document_starts'", "non-integer")
        expect_error("document_starts of one dimension", write(os.path.join(tmp, "drank.hdf5"),
                                                               dict(arrays, document_starts=starts[:, 0])),
                     "drank.hdf5", "'document_starts'", "1 dimensions")
    elif case == "values":
        arrays = make_arrays(3)
        ids = arrays["input_ids"].copy()
        ids[417, 5] = VOCAB
        expect_error("a token id equal to the vocabulary size", write(os.path.join(tmp, "vocab.hdf5"),
                                                                      dict(arrays, input_ids=ids)),
                     "vocab.hdf5", "'input_ids'", "row 417", f"value {VOCAB}")
        # 64-bit datasets: a value beyond int is reported as stored, not clamped to 2147483647.
        wide_ids = arrays["input_ids"].astype(np.uint64)
        wide_ids[123, 4] = 2**63 + 5
        expect_error("an unsigned 64-bit token id of 2^63 + 5", write(os.path.join(tmp, "u64.hdf5"),
                                                                     dict(arrays, input_ids=wide_ids),
                                                                     {"input_ids": "u8"}),
                     "u64.hdf5", "'input_ids'", "row 123", "column 4", f"value {2**63 + 5}")
        wide_pos = arrays["masked_lm_positions"].astype(np.int64)
        wide_pos[77, 0] = -2**40
        expect_error("a signed 64-bit position of -2^40", write(os.path.join(tmp, "i64.hdf5"),
                                                               dict(arrays, masked_lm_positions=wide_pos),
                                                               {"masked_lm_positions": "i8"}),
                     "i64.hdf5", "'masked_lm_positions'", "row 77", f"value {-2**40}")
        p64 = load(write(os.path.join(tmp, "all64.hdf5"), arrays, {k: "u8" for k in arrays}))
        p32 = load(write(os.path.join(tmp, "all32.hdf5"), arrays))
        c.expect("a valid shard stored as unsigned 64-bit reads the same batches as the int32/int8 one",
                 p64.returncode == 0 and p32.returncode == 0 and p64.stdout == p32.stdout, p64.stderr)
        pos = arrays["masked_lm_positions"].copy()
        pos[33, 1] = S
        expect_error("a masked position equal to the sequence length", write(os.path.join(tmp, "pos.hdf5"),
                                                                             dict(arrays, masked_lm_positions=pos)),
                     "pos.hdf5", "'masked_lm_positions'", "row 33")
        pos = arrays["masked_lm_positions"].copy()
        pos[250, 1] = pos[250, 0]
        expect_error("masked positions not ascending", write(os.path.join(tmp, "order.hdf5"),
                                                             dict(arrays, masked_lm_positions=pos)),
                     "order.hdf5", "'masked_lm_positions'", "row 250", "ascend")
        # Rows the model cannot mean, each value in its range: the mask is what the attention
        # lengths and the unpadded layout are built from (NVIDIA's layout: real tokens first).
        mask = arrays["input_mask"].copy()
        mask[71] = 0
        expect_error("an input_mask row of zeros", write(os.path.join(tmp, "nomask.hdf5"), dict(arrays, input_mask=mask)),
                     "nomask.hdf5", "'input_mask'", "row 71", "every value is 0")
        mask = arrays["input_mask"].copy()
        mask[72, 0] = 0  # 0 1 1 ... 1: not all zeros, and not a prefix of ones either
        expect_error("an input_mask row starting with a 0, then ones: the rule named (it must start with a 1)",
                     write(os.path.join(tmp, "lead.hdf5"), dict(arrays, input_mask=mask)),
                     "lead.hdf5", "'input_mask'", "row 72", "column 0", "must start with a 1", "column 1")
        mask = arrays["input_mask"].copy()
        mask[300, 10] = 0
        expect_error("an input_mask that is not a prefix of ones (a 0 at column 10, then ones)",
                     write(os.path.join(tmp, "hole.hdf5"), dict(arrays, input_mask=mask)),
                     "hole.hdf5", "'input_mask'", "row 300", "column 11", "value 1", "column 10")
        mask, pos = arrays["input_mask"].copy(), arrays["masked_lm_positions"].copy()
        mask[450, 12:] = 0
        pos[450, :2] = [3, 13]
        expect_error("a masked position in the padding (input_mask 0 there)",
                     write(os.path.join(tmp, "padpos.hdf5"), dict(arrays, input_mask=mask, masked_lm_positions=pos)),
                     "padpos.hdf5", "'masked_lm_positions'", "row 450", "column 1", "value 13", "padding")
        pos = arrays["masked_lm_positions"].copy()
        pos[520, :2] = [0, 4]
        expect_error("a leading masked position 0 before position 4 (the list would end before it starts)",
                     write(os.path.join(tmp, "lead0.hdf5"), dict(arrays, masked_lm_positions=pos)),
                     "lead0.hdf5", "'masked_lm_positions'", "row 520", "column 0", "value 0", "position 4")
        pos = arrays["masked_lm_positions"].copy()
        pos[5, 1:] = [0, 6]
        expect_error("a masked position after the 0 that ends the list",
                     write(os.path.join(tmp, "after0.hdf5"), dict(arrays, masked_lm_positions=pos)),
                     "after0.hdf5", "'masked_lm_positions'", "row 5", "column 2", "value 6")
        mask = arrays["input_mask"].copy()
        mask[:, 13:] = 0
        p = load(write(os.path.join(tmp, "padded.hdf5"), dict(arrays, input_mask=mask)))
        c.expect("rows padded after their real tokens (ones, then zeros) load", p.returncode == 0, p.stderr)
        pos = arrays["masked_lm_positions"].copy()
        pos[40] = 0
        p = load(write(os.path.join(tmp, "nopred.hdf5"), dict(arrays, masked_lm_positions=pos)))
        c.expect("a row without masked positions (all zero: next-sentence label only) loads", p.returncode == 0,
                 p.stderr)
        # document_starts (optional): valid ones load, in any integer dtype, beside a shard without
        # them; a bad one is named by file, dataset, row and value.
        starts = document_starts()
        p = load(write(os.path.join(tmp, "starts.hdf5"), dict(arrays, document_starts=starts)))
        p64 = load(write(os.path.join(tmp, "starts64.hdf5"), dict(arrays, document_starts=starts),
                         {"document_starts": "u8"}))
        c.expect("a shard with valid document_starts (i4 or u8) loads, as the same batches as without them",
                 p.returncode == 0 and p64.returncode == 0 and
                 p.stdout == p64.stdout == load(write(os.path.join(tmp, "nostarts.hdf5"), arrays)).stdout,
                 p.stderr + p64.stderr)
        one = write(os.path.join(tmp, "one.hdf5"), dict(arrays, document_starts=starts[:, :1] * 0))
        p = load(f"{good},{one}")
        c.expect("a shard whose document_starts has one column (zeros) loads beside a shard without it",
                 p.returncode == 0, p.stderr)
        for name, row, value, change, needles in (
                ("not starting at 0", 10, 3, lambda d: d.__setitem__((10, 0), 3), ["column 0", "begins at 0"]),
                ("descending", 21, 5, lambda d: d.__setitem__((21, slice(None)), [0, 7, 5, 0]),
                 ["column 2", "value 5 after start 7", "ascend"]),
                ("repeated", 23, 4, lambda d: d.__setitem__((23, slice(None)), [0, 4, 4, 0]), ["column 2", "value 4 after start 4"]),
                ("a start after the 0 that ends the list", 40, 6,
                 lambda d: d.__setitem__((40, slice(None)), [0, 0, 6, 0]), ["column 2", "after the 0"]),
                ("a start equal to the sequence length", 50, S, lambda d: d.__setitem__((50, 1), S),
                 ["column 1", "out of range"]),
                ("a negative start", 60, -1, lambda d: d.__setitem__((60, 1), -1), ["column 1", "out of range"])):
            bad = document_starts()
            change(bad)
            path = os.path.join(tmp, f"starts-{row}.hdf5")
            expect_error(f"document_starts {name}", write(path, dict(arrays, document_starts=bad)),
                         path, "'document_starts'", f"row {row}", f"{value}", *needles)
        mask, bad = arrays["input_mask"].copy(), document_starts()
        mask[450, 12:] = 0
        bad[450, 1:3] = [4, 12]
        expect_error("a document start in the padding (past the row's 12 real tokens)",
                     write(os.path.join(tmp, "padstart.hdf5"), dict(arrays, input_mask=mask, document_starts=bad)),
                     "padstart.hdf5", "'document_starts'", "row 450", "column 2", "value 12", "padding")
        nsp = arrays["next_sentence_labels"].copy()
        nsp[599] = 2
        expect_error("a next-sentence label of 2", write(os.path.join(tmp, "nsp.hdf5"),
                                                         dict(arrays, next_sentence_labels=nsp)),
                     "nsp.hdf5", "'next_sentence_labels'", "row 599")
    else:
        print(f"unknown case {case}")
        sys.exit(2)
c.finish()
