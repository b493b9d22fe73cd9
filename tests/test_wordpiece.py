"""WordPiece (tokenizer/wordpiece.c) against transformers' BertTokenizer, the Python reference
(the algorithm of google-research/bert's tokenization.py), with an uncased and a cased
vocabulary that the `tokenizers` library trains here: every id of every line equal, over a
sample of the linux-doc text, of Python's documentation and a Unicode stress text written
here (accents and combining marks, Greek, Cyrillic, Arabic, Hebrew, CJK, Hangul, Thai, emoji
and ZWJ sequences, zero-width and non-breaking spaces, control characters, U+FFFD, "ﬁ", ß,
Turkish İ, very long words, runs of punctuation, the special tokens in the text). Then: where
BertTokenizerFast (Rust) differs from the reference on the same lines (printed, not
asserted), `bench tokenizer`'s token count, decode against BertTokenizer's convert_tokens_to_string, the casing defaults and
options (prep's --cased / --lower-case, and its warning for a vocabulary that looks cased used
uncased by default), CR LF and CR line ends (BertTokenizer's ids), a directory or a
tokenizer.json given as the vocabulary and a tokenizer_config.json that is a directory, an
array or starts with a BOM (named as such), and bad vocabularies (BOM, empty line, duplicate, invalid UTF-8, a missing
special token): an error naming the file and the line.
usage: test_wordpiece.py BERTPRE"""
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import checks
from data_fixtures import Checks, linux_doc, run, skip

bertpre = sys.argv[1]
with checks.needs("transformers and tokenizers", hint="tools/requirements.txt pins them"):
    import transformers
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertTokenizer, BertTokenizerFast
transformers.logging.set_verbosity_error()

PYTHON_DOC = "/usr/share/doc/python3.11/html/_sources"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def sample_lines(paths, opener, budget, every):
    """Non-empty lines of every `every`-th file, until `budget` bytes."""
    lines, size = [], 0
    for path in paths[::every]:
        with opener(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.strip():
                    lines.append(line)
                    size += len(line.encode()) + 1
        if size >= budget:
            break
    return lines


def stress_lines():
    long_word = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # 135 letters: over 100, [UNK]
    just_100 = "a" * 100
    lines = [
        "Crème brûlée, naïve café, façade, São Paulo, Ærøskøbing, Łódź, Dvořák, Zürich",
        "Decomposed: Cre\u0300me bru\u0302le\u0301e nai\u0308ve cafe\u0301 e\u0301\u0301 a\u0323\u0302 q\u0307\u0323",
        "Combining marks alone: \u0301 \u0308\u0301 x\u0338 <\u0338 =\u0338 >\u0338 a<\u0338b",
        "Greek: Καλημέρα κόσμε, ΟΔΟΣ ΣΟΦΟΣ ΊΡΙΣ ΰ ΐ ᾂ ᾯ ῼ; ;",
        "Cyrillic: Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка ЙОД й",
        "Arabic: مرحبا بالعالم، كيف حالك؟ هذا نص عربي مع تشكيل: مُحَمَّد",
        "Hebrew: שָׁלוֹם עוֹלָם ﬀ שּׁ ﬡ",
        "CJK: 我爱北京天安门。日本語のテキストです。漢字かな交じり文 𠀀𠀁 丽 𪘀 㐀",
        "Hangul: 안녕하세요 세계 한국어 텍스트 각",
        "Thai: สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
        "Devanagari: नमस्ते दुनिया क़ ख़ ग़",
        "Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇩🇪 1️⃣ 😀😃😄 ☕",
        "Zero-width: zero\u200bwidth\u200cjoin\u200dner soft\u00adhyphen word\u2060joiner \ufeffbom",
        "Spaces: no\u00a0break thin\u2009space ideographic\u3000space em\u2003space narrow\u202fnbsp ogham\u1680mark",
        "Separators: line\u2028separator paragraph\u2029separator next\u0085line",
        "Controls: bell\x07 back\x08space vtab\x0bform\x0cfeed esc\x1b[0m del\x7f unit\x1fsep c1\x9cst \x00nul",
        "Replacement: bad\ufffdchar \ufffd\ufffd private\ue000use unassigned\U000e0080 tag\U000e0041",
        "Ligatures: ﬁnance ﬂow ﬀ ﬃ ﬄ ﬅ Ǆ ǅ ǆ Ĳ ĳ ŉ",
        "German: Straße STRASSE Fuß Maß ẞ groß",
        "Turkish: İstanbul İZMİR ıi Iı DİYARBAKIR i̇",
        "Compatibility: ① ² ½ Ⅻ ｆｕｌｌｗｉｄｔｈ ＡＢＣ ｶﾀｶﾅ ㎞ ℃ Ω Å K ℌ",
        f"Long words: {long_word} {just_100} {just_100}b x{just_100}",
        "Punctuation runs: ...!!!??? --- ((([[[{{{}}}]]]))) \"'`~@#$%^&*_+=|\\/<>,.;: ¡¿ «» „“ ‹› —–‐ … ‰ § ¶ † ‡ • ※",
        "Symbols: $100 €200 £300 ¥400 ₹500 ∑∏∫√∞ ≠≤≥ ±×÷ → ⇒ ∀∃ ♠♣♥♦ © ® ™ ° µ",
        "Special tokens: [CLS] first [SEP] second [SEP] a[MASK]b [PAD][UNK] [cls] [ MASK ] [MASK]] [[SEP] [SE\x00P]",
        "Special tokens, Unicode around: é[MASK]é 日[SEP]本 [CLS]\u0301 \u00a0[UNK]\u00a0",
        "Mixed scripts: Hello世界 καιworld Привет123 abc١٢٣ x²+y²=z² naïve-ÉCOLE O'Neill's",
        "Numbers: 3.14159 1,000,000 2024-01-15 10:30:45 0x1F4A9 1e-10 ٣٤٥ ໑໒ ①②",
        "Code: def f(x): return x**2 if x>0 else -x  # comment; int main(){printf(\"%d\\n\", a[i]);}",
        "URLs: https://example.com/path?query=1&b=2#frag user@example.org C:\\Windows\\System32",
        "Tabs\tand\ttabs\t\tdouble  spaces   triple",
        "Mathematical: 𝐀𝐁𝐂 𝒳𝒴 𝔄𝔅 𝟘𝟙 ℝℕℤ",
        "Old scripts: 𐌰𐌱𐌲 ᚠᚢᚦ 𓀀𓀁 ꦲꦏ",
        "Variation: ︎☺︎ ☺️ 葛󠄀 ",
        "Capital sigma ends: ΟΔΟΣ. ΣΑΣ, Σ Ὀδυσσεύς",
        "Ohm Kelvin Angstrom: \u2126 \u212a \u212b \u1fef \u037e \u0387",
        "Hangul jamo compose: \u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8",
        "Dotless: ı İ i̇ ǰ ẖ",
        "Final: ÀÉÎÕÜ àéîõü ÇÑ çñ ÅØ åø",
    ]
    # Each line also lower- and upper-cased, and with the stress characters glued together.
    more = []
    for line in lines:
        more += [line.lower(), line.upper(), line.replace(" ", "")]
    return lines + more


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def our_ids(vocab, path, *flags):
    out = run([bertpre, "tokenizer", "encode", "--model", vocab, *flags, path]).stdout
    return [[int(t) for t in l.split()] for l in out.split("\n")[:-1]]


c = Checks()
t_start = time.time()
linux = sample_lines(sorted(glob.glob(os.path.join(linux_doc(), "**", "*.rst.gz"), recursive=True)),
                     lambda p: gzip.open(p, "rt", encoding="utf-8", errors="replace"), 400_000, 9)
pydoc_files = sorted(glob.glob(os.path.join(PYTHON_DOC, "**", "*.rst.txt"), recursive=True))
if not pydoc_files:
    skip(f"Python's documentation sources are not installed ({PYTHON_DOC}; tools/setup.sh installs python3.11-doc)")
pydoc = sample_lines(pydoc_files, lambda p: open(p, encoding="utf-8", errors="replace"), 300_000, 5)
stress = stress_lines()
# A line of the file must be a line for both sides: no newline inside (the test writes \n
# line ends; \r at a line end the CLI drops, where BERT reads it as white space: the same ids).
corpora = {"linux-doc": linux, "python-doc": pydoc, "stress": stress}
for name, lines in corpora.items():
    assert not any("\n" in l for l in lines), name
    print(f"{name}: {len(lines)} lines, {sum(len(l.encode()) + 1 for l in lines) / 1e3:.0f} kB")

with tempfile.TemporaryDirectory() as tmp:
    # Vocabularies: trained by the tokenizers library on all three texts (so that accented
    # and foreign pieces exist and are looked up), uncased and cased.
    train_file = os.path.join(tmp, "train.txt")
    write_lines(train_file, linux + pydoc + stress * 20)
    vocabs = {}
    for cased in (False, True):
        d = os.path.join(tmp, "cased" if cased else "uncased")
        os.mkdir(d)
        trainer = BertWordPieceTokenizer(lowercase=not cased, strip_accents=None, clean_text=True,
                                         handle_chinese_chars=True)
        trainer.train([train_file], vocab_size=6000, min_frequency=2, special_tokens=SPECIALS,
                      limit_alphabet=3000, show_progress=False)
        trainer.save_model(d)
        vocabs[cased] = os.path.join(d, "vocab.txt")
        if cased:  # the casing default comes from here; the uncased one has no config
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                f.write('{"do_lower_case": false, "tokenizer_class": "BertTokenizer"}\n')
    print(f"vocabularies trained ({time.time() - t_start:.1f} s so far)")

    for cased in (False, True):
        vocab, what = vocabs[cased], "cased" if cased else "uncased"
        info = dict(l.split() for l in run([bertpre, "tokenizer", "info", "--model", vocab]).stdout.splitlines())
        ref = BertTokenizer(vocab, do_lower_case=not cased)
        fast = BertTokenizerFast(vocab, do_lower_case=not cased)
        c.expect(f"{what}: info reads the vocabulary as BERT does (size, special ids, casing from "
                 f"{'tokenizer_config.json' if cased else 'the uncased default'})",
                 info["kind"] == "wordpiece" and int(info["vocab_size"]) == len(ref.vocab) and
                 [int(info[k]) for k in ("pad", "unk", "cls", "sep", "mask")] == ref.convert_tokens_to_ids(SPECIALS)
                 and info["lower_case"] == str(int(not cased)) and info["strip_accents"] == str(int(not cased)),
                 str(info))
        for name, lines in corpora.items():
            path = os.path.join(tmp, f"{name}.txt")
            write_lines(path, lines)
            t0 = time.time()
            theirs = [ref.encode(l, add_special_tokens=False) for l in lines]
            t_ref = time.time() - t0
            ours = our_ids(vocab, path)
            bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
            n_ids = sum(len(t) for t in theirs)
            detail = ""
            if bad:
                i = bad[0]
                detail = (f"{len(bad)} lines differ; first: line {i + 1} {lines[i]!r}: ours "
                          f"{ref.convert_ids_to_tokens(ours[i])} reference {ref.convert_ids_to_tokens(theirs[i])}")
            elif len(ours) != len(lines):
                detail = f"{len(ours)} lines of ids for {len(lines)} lines"
            c.expect(f"{what} {name}: every id equal to BertTokenizer's ({len(lines)} lines, {n_ids} ids, "
                     f"reference {t_ref:.1f} s)", not bad and len(ours) == len(lines), detail)
            if name == "linux-doc":
                b = run([bertpre, "bench", "tokenizer", "--model", vocab, "--repeat", 1, path]).stdout
                c.expect(f"{what}: bench tokenizer encodes the same {n_ids} tokens", f" {n_ids} tokens:" in b,
                         b.strip())
            # Where the Rust BertTokenizerFast differs from the reference (a report, not a check).
            fast_ids = fast(lines, add_special_tokens=False)["input_ids"]
            differ = [i for i in range(len(lines)) if fast_ids[i] != theirs[i]]
            print(f"     BertTokenizerFast differs from BertTokenizer on {len(differ)} of {len(lines)} {name} lines")
            for i in differ[:6]:
                a, b = fast.convert_ids_to_tokens(fast_ids[i]), ref.convert_ids_to_tokens(theirs[i])
                k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
                print(f"       {lines[i][:70]!r}: fast {a[max(0, k - 2):k + 3]} reference {b[max(0, k - 2):k + 3]}")
            if name == "stress":
                # Decode: BERT's convert_tokens_to_string of the same ids.
                ids_path = os.path.join(tmp, "ids.txt")
                with open(ids_path, "w") as f:
                    f.write("".join(" ".join(map(str, t)) + "\n" for t in theirs))
                decoded = run([bertpre, "tokenizer", "decode", "--model", vocab, ids_path]).stdout.split("\n")
                want = [ref.convert_tokens_to_string(ref.convert_ids_to_tokens(t)) for t in theirs]
                same = sum(a == b for a, b in zip(decoded, want))
                c.expect(f"{what}: decode equals BertTokenizer's convert_tokens_to_string on all {len(want)} "
                         "stress lines", same == len(want), f"{same} equal")

    # Casing options over the defaults: the cased vocabulary read as uncased (and the reverse)
    # gives BertTokenizer's ids with that casing; accents kept while lower-casing, too.
    path = os.path.join(tmp, "stress.txt")
    for vocab, flags, kw in ((vocabs[True], ["--lower-case"], {"do_lower_case": True}),
                             (vocabs[False], ["--cased"], {"do_lower_case": False}),
                             (vocabs[False], ["--keep-accents"], {"do_lower_case": True, "strip_accents": False}),
                             (vocabs[True], ["--strip-accents"], {"do_lower_case": False, "strip_accents": True})):
        ref = BertTokenizer(vocab, **kw)
        theirs = [ref.encode(l, add_special_tokens=False) for l in stress]
        ours = our_ids(vocab, path, *flags)
        same = sum(a == b for a, b in zip(ours, theirs))
        c.expect(f"{' '.join(flags)} on the {'cased' if vocab == vocabs[True] else 'uncased'} vocabulary: "
                 f"BertTokenizer({kw})'s ids on all {len(stress)} stress lines", same == len(stress) == len(ours),
                 f"{same} equal")
    p = run([bertpre, "tokenizer", "info", "--model", vocabs[True], "--cased", "--lower-case"], check=False)
    c.expect("--cased with --lower-case: refused", p.returncode != 0 and "contradict" in p.stderr, p.stderr.strip())

    # A tokenizer_config.json as transformers saves it without a maximum length: its
    # model_max_length is an integer beyond 64 bits (valid JSON, read by Python's json); the
    # casing is still read from it.
    saved = os.path.join(tmp, "saved")
    os.mkdir(saved)
    with open(vocabs[True], encoding="utf-8") as f, open(os.path.join(saved, "vocab.txt"), "w") as g:
        g.write(f.read())
    with open(os.path.join(saved, "tokenizer_config.json"), "w") as f:
        f.write('{"do_lower_case": false, "model_max_length": 1000000000000000019884624838656, '
                '"tokenizer_class": "BertTokenizer"}\n')
    with open(os.path.join(saved, "tokenizer_config.json")) as f:
        py = json.load(f)
    p = run([bertpre, "tokenizer", "info", "--model", os.path.join(saved, "vocab.txt")], check=False)
    c.expect("tokenizer_config.json with model_max_length 10^30 (as transformers saves it): read, casing from it",
             p.returncode == 0 and f"lower_case {int(py['do_lower_case'])}" in p.stdout, p.stdout + p.stderr)

    # A tokenizer.json beside the vocabulary (as transformers saves a BERT) whose normalizer's
    # lowercase is not the casing in effect: bertpre follows tokenizer_config.json's
    # do_lower_case (true when it is absent or says nothing), as AutoTokenizer does, and warns
    # naming tokenizer.json and the option that chooses; the reference is AutoTokenizer's ids
    # from the same directory. When the two agree, or an option chose, no warning.
    from transformers import AutoTokenizer
    stress_path = os.path.join(tmp, "stress.txt")
    for json_lower, config, flags, warned in ((False, {"do_lower_case": True}, [], True),
                                              (False, {}, [], True),
                                              (False, None, [], True),
                                              (True, {"do_lower_case": False}, [], True),
                                              (False, {"do_lower_case": False}, [], False),
                                              (False, {"do_lower_case": True}, ["--cased"], False)):
        d = os.path.join(tmp, f"json-{json_lower}-{len(os.listdir(tmp))}")
        os.mkdir(d)
        vocab = os.path.join(d, "vocab.txt")
        with open(vocabs[True], encoding="utf-8") as f, open(vocab, "w", encoding="utf-8") as g:
            g.write(f.read())
        BertTokenizerFast(vocab, do_lower_case=json_lower).backend_tokenizer.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "bert"}, f)
        if config is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({**config, "tokenizer_class": "BertTokenizer"}, f)
        p = run([bertpre, "tokenizer", "encode", "--model", vocab, *flags, stress_path], check=False)
        ours = [[int(t) for t in l.split()] for l in p.stdout.split("\n")[:-1]]
        # AutoTokenizer's casing; the ids of BertTokenizer (the exact reference: the Rust
        # tokenizer differs from it on a few stress lines, as printed above) with that casing.
        auto = AutoTokenizer.from_pretrained(d, **({"do_lower_case": False} if flags else {}))
        auto_lower = json.loads(auto.backend_tokenizer.normalizer.__getstate__())["lowercase"]
        ref = BertTokenizer(vocab, do_lower_case=auto_lower)
        theirs = [ref.encode(l, add_special_tokens=False) for l in stress]
        what = (f"tokenizer.json lowercase {str(json_lower).lower()}, tokenizer_config.json "
                f"{json.dumps(config) if config is not None else 'absent'}{' ' + ' '.join(flags) if flags else ''}")
        said = "warning" in p.stderr and os.path.join(d, "tokenizer.json") in p.stderr and "AutoTokenizer" in p.stderr
        expect_ok = p.returncode == 0 and ours == theirs and said == warned and (not warned or (
            "--lower-case" if json_lower else "--cased") in p.stderr)
        c.expect(f"{what}: AutoTokenizer's casing ({'lower-cased' if auto_lower else 'cased'}), BertTokenizer's ids "
                 f"with it on all {len(stress)} stress lines, "
                 f"{'a warning naming tokenizer.json and the option' if warned else 'no warning'}", expect_ok,
                 f"exit {p.returncode}, {sum(a == b for a, b in zip(ours, theirs))} equal\n{p.stderr}")

    # prep's casing: --cased / --lower-case reach the tokenizer, and a vocabulary that looks
    # cased (capitalised tokens, counted here from the file) but is lower-cased by default (no
    # tokenizer_config.json beside it, no option) is named in a warning. The shards' rows, their
    # masked positions restored, hold capitalised tokens exactly when the text kept its case.
    version = run([bertpre, "--version"]).stdout
    try:
        import h5py
    except ImportError:
        h5py = None
    if "HDF5: yes" not in version or h5py is None:
        print("SKIP (prep casing part): needs a bertpre with HDF5 and h5py")
    else:
        bare = os.path.join(tmp, "cased-bare")
        os.mkdir(bare)
        bare_vocab = os.path.join(bare, "vocab.txt")
        with open(vocabs[True], encoding="utf-8") as f, open(bare_vocab, "w", encoding="utf-8") as g:
            tokens = f.read().split("\n")[:-1]
            g.write("\n".join(tokens) + "\n")
        capital = {i for i, t in enumerate(tokens)
                   if any("A" <= ch <= "Z" for ch in t) and not (t.startswith("[") and t.endswith("]"))}
        text = os.path.join(tmp, "linux-doc.txt")

        def prep(vocab, name, *flags):
            out = os.path.join(tmp, name)
            p = run([bertpre, "prep", "--tokenizer", vocab, "--output", out, "--format", "lines", "--seq-length", 64,
                     "--max-predictions", 8, "--dupe-factor", 1, "--no-progress", *flags, text], check=False)
            rows = 0
            for path in sorted(glob.glob(os.path.join(out, "*.hdf5"))):
                with h5py.File(path, "r") as h:
                    ids, pos, lab = h["input_ids"][:], h["masked_lm_positions"][:], h["masked_lm_ids"][:]
                for r in range(len(ids)):
                    for k in range(pos.shape[1]):
                        if pos[r, k]:
                            ids[r, pos[r, k]] = lab[r, k]
                    rows += any(int(t) in capital for t in ids[r])
            return p, rows

        p, rows = prep(bare_vocab, "prep-cased-default")
        c.expect(f"prep, cased vocabulary ({len(capital)} capitalised tokens) without tokenizer_config.json: a "
                 "warning naming it and --cased; lower-cased, so no row holds a capitalised token",
                 p.returncode == 0 and "warning" in p.stderr and f"{bare_vocab} looks cased" in p.stderr and
                 "--cased" in p.stderr and rows == 0, f"exit {p.returncode}, {rows} rows\n{p.stderr}")
        p, rows = prep(bare_vocab, "prep-cased", "--cased")
        c.expect("prep --cased on it: no warning, rows with capitalised tokens",
                 p.returncode == 0 and "looks cased" not in p.stderr and rows > 0, f"{rows} rows\n{p.stderr}")
        p, _ = prep(bare_vocab, "prep-lower", "--lower-case")
        c.expect("prep --lower-case on it: no warning (the casing was asked for)",
                 p.returncode == 0 and "looks cased" not in p.stderr, p.stderr)
        p, _ = prep(vocabs[False], "prep-uncased")
        c.expect("prep, uncased vocabulary without tokenizer_config.json: no casing warning",
                 p.returncode == 0 and "looks cased" not in p.stderr, p.stderr)
        p, _ = prep(bare_vocab, "prep-both", "--cased", "--lower-case")
        c.expect("prep --cased --lower-case: refused", p.returncode != 0 and "contradict" in p.stderr, p.stderr)

    # Bad vocabularies: an error naming the file and the line; nothing tokenized.
    good = open(vocabs[False], encoding="utf-8").read().split("\n")[:-1]
    cases = {
        "bom": ("\ufeff" + "\n".join(good) + "\n", ":1:", "byte-order mark"),
        "empty": ("\n".join(good[:50] + [""] + good[50:]) + "\n", ":51:", "empty line"),
        "duplicate": ("\n".join(good[:200] + [good[150]] + good[200:]) + "\n", ":201:", "repeats line 151"),
        "missing": ("\n".join(t for t in good if t != "[MASK]") + "\n", "", "[MASK]"),
    }
    for name, (text, where, what) in cases.items():
        bad_path = os.path.join(tmp, f"{name}-vocab.txt")
        with open(bad_path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        p = run([bertpre, "tokenizer", "encode", "--model", bad_path, path], check=False)
        c.expect(f"vocabulary with {name}: exit 1, an error naming the file{' and line ' + where if where else ''} "
                 f"and the fault", p.returncode == 1 and f"{bad_path}{where}" in p.stderr and what in p.stderr
                 and not p.stdout, p.stderr.strip())
    # An id beyond 64 bits in decode's input is named as written, not as it wrapped.
    ids_path = os.path.join(tmp, "big-ids.txt")
    with open(ids_path, "w") as f:
        f.write("5 18446744073709551616\n")
    p = run([bertpre, "tokenizer", "decode", "--model", vocabs[False], ids_path], check=False)
    c.expect("decode of id 2^64: exit 1 naming the id as written and the line", p.returncode == 1 and
             f"{ids_path}:1: id 18446744073709551616" in p.stderr and "id -1" not in p.stderr, p.stderr.strip())
    # CR LF and CR line ends: BertTokenizer reads the file in Python's text mode, where both end a
    # line, so the same ids as the LF file; bertpre reads them the same way.
    ref = BertTokenizer(vocabs[False], do_lower_case=True)
    theirs = [ref.encode(l, add_special_tokens=False) for l in stress]
    for name, sep in (("CR LF", "\r\n"), ("CR", "\r")):
        d = os.path.join(tmp, name.replace(" ", "").lower())
        os.mkdir(d)
        ends_path = os.path.join(d, "vocab.txt")
        with open(ends_path, "w", encoding="utf-8", newline="") as f:
            f.write(sep.join(good) + sep)
        theirs_ends = [BertTokenizer(ends_path, do_lower_case=True).encode(l, add_special_tokens=False)
                       for l in stress]
        ours = our_ids(ends_path, path)
        c.expect(f"vocabulary with {name} line ends: BertTokenizer's ids (as with LF) on all {len(stress)} stress "
                 "lines", ours == theirs_ends == theirs, f"{sum(a == b for a, b in zip(ours, theirs_ends))} equal")
    # Files that are not a vocab.txt: named as what they are.
    tok_json = os.path.join(tmp, "tokenizer.json")
    with open(tok_json, "w") as f:
        json.dump({"version": "1.0", "model": {"type": "WordPiece", "vocab": {"[PAD]": 0}}}, f, indent=2)
    for what, given, words in (("a directory", tmp, ["a directory", "vocab.txt"]),
                               ("a tokenizer.json", tok_json, ["JSON object", "tokenizer.json", "vocab.txt"])):
        p = run([bertpre, "tokenizer", "info", "--model", given], check=False)
        c.expect(f"{what} given as the vocabulary: exit 1 saying what it is", p.returncode == 1 and
                 given in p.stderr and all(w in p.stderr for w in words) and "read error" not in p.stderr,
                 p.stderr.strip())
    # tokenizer_config.json beside a vocabulary that is not an object of settings.
    d = os.path.join(tmp, "badconfig")
    os.mkdir(d)
    with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(good) + "\n")
    conf = os.path.join(d, "tokenizer_config.json")
    for what, write, words in (("a directory", lambda: os.mkdir(conf), ["a directory"]),
                               ("a JSON array", lambda: open(conf, "w").write("[1, 2]\n"), ["array", "object"]),
                               ("a byte-order mark", lambda: open(conf, "wb").write(b"\xef\xbb\xbf{}\n"),
                                ["byte-order mark"])):
        if os.path.isdir(conf):
            os.rmdir(conf)
        elif os.path.exists(conf):
            os.remove(conf)
        write()
        p = run([bertpre, "tokenizer", "info", "--model", os.path.join(d, "vocab.txt")], check=False)
        c.expect(f"tokenizer_config.json that is {what}: exit 1 naming it and why", p.returncode == 1 and
                 conf in p.stderr and all(w in p.stderr for w in words), p.stderr.strip())
    bad_path = os.path.join(tmp, "utf8-vocab.txt")
    with open(bad_path, "wb") as f:
        f.write("\n".join(good[:300]).encode() + b"\nab\xffcd\n" + "\n".join(good[300:]).encode() + b"\n")
    p = run([bertpre, "tokenizer", "info", "--model", bad_path], check=False)
    c.expect("vocabulary with invalid UTF-8: exit 1, naming file, line 301 and the byte",
             p.returncode == 1 and f"{bad_path}:301:" in p.stderr and "0xff" in p.stderr, p.stderr.strip())
print(f"test time {time.time() - t_start:.1f} s")
c.finish()
