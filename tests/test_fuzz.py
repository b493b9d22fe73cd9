"""Bounded, deterministic fuzzing of the two parsers that take files from users: the config
reader (`bertpre train CONFIG --dry-run`) and the HDF5 shard reader (tests/dump.c loader,
which opens, checks and reads every row through the loader and its prefetch thread).
A fixed seed and a fixed number of mutated inputs, so every CI run tries the same cases.

Each case must end in one of two ways: exit 0, or exit 1 with one `bertpre: error:` message
(and, for shards, naming the shard and without HDF5's own diagnostics). A signal, another
exit status, a message-less failure or a run over 20 s counts as a crash. The input file
must be byte-identical afterwards (nothing lost). Shards damaged where HDF5 stores no
checksum can read back different values in range: those are counted, not failed.

  config  360 mutants of every file in configs/ and a small run config: fields deleted,
          set to values of every JSON type and extreme numbers, unknown fields added, and
          byte-level flips, insertions and truncations.
  shard   240 mutants of a shard written by h5py (600 rows, gzip): bit flips, overwritten
          and zeroed byte runs, truncations.

usage: test_fuzz.py BERTPRE DUMP CONFIGS_DIR CASE
"""
import json
import os
import random
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, dump, configs, case = sys.argv[1:5]
have_hdf5 = checks.features(bertpre)["hdf5"]
VALUES = [None, True, False, "", "auto", "x" * 300, -1, 0, 1, 3, 2 ** 31, -2 ** 31, 2 ** 63 - 1, 1e308, -1e308,
          1e-320, 0.5, -0.0, [], {}, [1, 2], {"a": 1}, "fp16", "gelu", "/nonexistent/x.hdf5"]


def classify(p, path, data, shard=False):
    """'ok' | 'rejected' | a description of the crash."""
    with open(path, "rb") as f:
        if f.read() != data:
            return "the input file changed"
    if p is None:
        return "timeout"
    lines = p.stderr.strip().split("\n")
    if p.returncode == 0:
        return "ok"
    if p.returncode != 1:
        return f"exit {p.returncode}"
    if not lines or not lines[-1].startswith("bertpre: error:"):
        return "exit 1 without a message"
    if shard and ("HDF5-DIAG" in p.stderr or os.path.basename(path) not in p.stderr):
        return "a shard error with HDF5 diagnostics or not naming the shard"
    return "rejected"


def run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, errors="replace")
    except subprocess.TimeoutExpired:
        return None


def mutate_json(rng, doc):
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.randint(1, 3)):
        sections = [s for s in ("model", "train") if isinstance(doc.get(s), dict)]
        kind = rng.random()
        if not sections or kind < 0.1:
            key = rng.choice(["model", "train", "extra"])
            doc[key] = rng.choice(VALUES)
            continue
        sec = doc[rng.choice(sections)]
        if kind < 0.3 and sec:
            del sec[rng.choice(sorted(sec))]
        elif kind < 0.4:
            sec[rng.choice(["unknown_field", "hidden_act", "position_embedding_type", "architectures"])] = \
                rng.choice(VALUES)
        elif sec:
            sec[rng.choice(sorted(sec))] = rng.choice(VALUES)
    return json.dumps(doc).encode()


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        at = rng.randrange(max(1, len(data)))
        if kind < 0.4 and data:
            data[at] ^= 1 << rng.randrange(8)
        elif kind < 0.6:
            data[at:at] = bytes([rng.choice(b'{}[]",:0-9e.\\ \x00\xff')])
        elif kind < 0.8:
            del data[at:at + rng.randint(1, 20)]
        else:
            data = data[:at]
    return bytes(data)


def report(what, results, tried):
    crashes = {k: v for k, v in results.items() if k not in ("ok", "rejected", "read other values")}
    parts = ", ".join(f"{v} {k}" for k, v in sorted(results.items()))
    print(f"{what}: {tried} cases tried: {parts}; {sum(crashes.values())} crashes; nothing lost (every input "
          "byte-identical afterwards)")
    expect(f"{what}: {tried} fuzzed inputs, every one accepted or rejected with one message, no crash, hang or "
           "damage to the input", not crashes and sum(results.values()) == tried, crashes)


def case_config(tmp):
    rng = random.Random(20261123)
    bases = []
    for name in sorted(os.listdir(configs)):
        with open(os.path.join(configs, name)) as f:
            doc = json.load(f)
        if "model" not in doc:
            doc = {"model": os.path.join(os.path.abspath(configs), name), "train": {"seq_length": 16}}
        bases.append(doc)
    bases.append({"model": {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 32, "max_position_embeddings": 32},
                  "train": {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24,
                            "max_predictions_per_seq": 4, "steps": 4, "checkpoint_dir": os.path.join(tmp, "ck")}})
    results, tried = {}, 360
    for i in range(tried):
        base = bases[i % len(bases)]
        data = mutate_json(rng, base) if rng.random() < 0.6 else mutate_bytes(rng, json.dumps(base, indent=1).encode())
        path = os.path.join(tmp, f"c{i}.json")
        with open(path, "wb") as f:
            f.write(data)
        outcome = classify(run([bertpre, "train", path, "--dry-run"]), path, data)
        results[outcome] = results.get(outcome, 0) + 1
        if outcome not in ("ok", "rejected"):
            print(f"     case {i}: {outcome}: {data[:300]!r}")
    report("config fuzz", results, tried)


def case_shard(tmp):
    if not have_hdf5:
        print("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)")
        sys.exit(77)
    import h5py
    import numpy as np
    g = np.random.default_rng(9)
    N, S, P, V = 600, 16, 3, 1000
    ids = g.integers(5, V, size=(N, S))
    ids[:, 0], ids[:, -1] = 2, 3
    pos = np.sort(np.stack([g.choice(np.arange(1, S - 1), P, replace=False) for _ in range(N)]), axis=1)
    base = os.path.join(tmp, "base.hdf5")
    with h5py.File(base, "w") as f:
        for k, v, t in (("input_ids", ids, "i4"), ("input_mask", np.ones((N, S)), "i1"),
                        ("segment_ids", (np.arange(S) >= S // 2)[None].repeat(N, 0), "i1"),
                        ("masked_lm_positions", pos, "i4"), ("masked_lm_ids", np.take_along_axis(ids, pos, 1), "i4"),
                        ("next_sentence_labels", g.integers(0, 2, N), "i1")):
            f.create_dataset(k, data=v, dtype=t, compression="gzip", chunks=(64,) + v.shape[1:])
    with open(base, "rb") as f:
        original = f.read()
    reference = run([dump, "loader", base, "4", str(V), "160", "1"])
    expect("the undamaged shard reads", reference is not None and reference.returncode == 0,
           reference.stderr if reference else "timeout")
    rng = random.Random(4242)
    results, tried = {}, 240
    for i in range(tried):
        data = bytearray(original)
        kind = rng.random()
        if kind < 0.4:
            for _ in range(rng.randint(1, 8)):
                bit = rng.randrange(len(data) * 8)
                data[bit // 8] ^= 1 << (bit % 8)
        elif kind < 0.65:
            at, n = rng.randrange(len(data)), rng.randint(1, 64)
            data[at:at + n] = bytes(rng.getrandbits(8) for _ in range(len(data[at:at + n])))
        elif kind < 0.8:
            at, n = rng.randrange(len(data)), rng.randint(1, 512)
            data[at:at + n] = bytes(len(data[at:at + n]))
        else:
            data = data[:rng.randrange(len(data))]
        data = bytes(data)
        path = os.path.join(tmp, f"s{i}.hdf5")
        with open(path, "wb") as f:
            f.write(data)
        p = run([dump, "loader", path, "4", str(V), "160", "1"])
        outcome = classify(p, path, data, shard=True)
        if outcome == "ok" and p.stdout != reference.stdout:
            outcome = "read other values"
        results[outcome] = results.get(outcome, 0) + 1
        if outcome not in ("ok", "rejected", "read other values"):
            print(f"     case {i}: {outcome}: {(p.stderr if p else '')[-400:]}")
        os.remove(path)
    report("shard fuzz", results, tried)


with tempfile.TemporaryDirectory() as tmp:
    {"config": case_config, "shard": case_shard}[case](tmp)
sys.exit(checks.exit_status())
