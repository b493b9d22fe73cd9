"""A byte-level BPE tokenizer.json (ModernBERT's kind: GPT-2's pre-tokenizer pattern and byte
map, NFC, added tokens) gives the `tokenizers` library's ids in bertpre.

The tokenizer is built here with the installed `tokenizers` library (0.15 in .venv writes
merges as "a b" strings; 0.2x in .venv-hf5, with `hf5`, as [a, b] pairs): BPE trained on the
repository's docs to 3,000 pieces with the ByteLevel pre-tokenizer and decoder, an NFC
normalizer, and the added tokens of a BERT-style MLM tokenizer as ModernBERT's has them:
[UNK], [CLS], [SEP], [PAD] special and un-normalized, [MASK] with lstrip, plus a normalized
run of three spaces, a single-word token and an rstrip one. Compared, exactly, with
tokenizers' encode(text, add_special_tokens=False): held-back text (the C and CUDA sources'
lines, never trained on) and texts made to reach every rule: whitespace runs (spaces, tabs,
newlines, CR LF, NBSP, ideographic space) before words and at the end, the contractions and
their capitals, digits and other numbers, composed and decomposed accents (NFC), CJK,
Arabic, Devanagari's combining marks, emoji with ZWJ and flags, and the added tokens written
in the text (with spaces before [MASK], inside words, the single-word one inside a word).
Also: bertpre's decode of each text's ids equals tokenizers' decode; the special ids; a
tokenizer.json bertpre cannot compute (a WordPiece model, byte_fallback, a Lowercase
normalizer, a Metaspace pre-tokenizer) is refused naming the field and value.

usage: test_bpe_tokenizer.py BERTPRE SOURCE_ROOT [hf5]
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, root = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3 and sys.argv[3] == "hf5":
    checks.run_in_hf5()
with checks.needs("the tokenizers library", hint="tools/setup.sh installs transformers, which brings it"):
    import tokenizers
    from tokenizers import AddedToken
from data_fixtures import byte_level_bpe  # noqa: E402

CRAFTED = [
    "Hello world", "  two spaces before", "trailing spaces   ", "tabs\tand\t\ttabs", "line\nbreak\n\nand two",
    "windows\r\nline\r\n", "   ", "", " ", "\n", "a  b   c    d", "nbsp\u00a0here and\u3000ideographic",
    "don't I'm we'll they're you've he'd it's", "DON'T I'M WE'LL 'S 'T", "x's y'all o'clock ''quoted''",
    "123 4567 3.14159 \u00b2\u00b3 \u2164 \u0663\u0664", "caf\u00e9 cafe\u0301 na\u00efve re\u0301sume\u0301",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
    "emoji \U0001f600\U0001f468\u200d\U0001f469\u200d\U0001f467 flags \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "The capital of France is [MASK].", "two spaces then  [MASK] and [MASK][MASK]", "[CLS] a [SEP] b [SEP]",
    "no[SEP]space[PAD]x[UNK]", "mask[MASK]inside", "bertpre is here; notbertprehere; bertpre.",
    "keep>>  the rstrip", "a   b (three spaces, an added token)", "      six spaces",
    "punctuation!!! ... ?!?! --- ''' \"\"\" ```code```", "mixed\u00a0\t \n end", "\u00e9\u0301\u0300 stacked marks",
    "URLs https://example.com/path?q=1&r=2#frag and emails a.b@c.de",
]


def build(tmp):
    path = os.path.join(tmp, "tokenizer.json")
    tok = byte_level_bpe(sorted(glob.glob(os.path.join(root, "docs", "*.md"))), 3000, path)
    tok.add_tokens([AddedToken("   ", normalized=True), AddedToken("bertpre", single_word=True, normalized=True),
                    AddedToken(">>", rstrip=True, normalized=False)])
    tok.save(path)
    return tok, path


def held_back():
    lines = []
    for pattern in ("kernels/cuda/*.cu", "engine/*.c", "tokenizer/*.c"):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            with open(path, encoding="utf-8") as f:
                lines += [line.rstrip("\n") for line in f if line.strip()]
    return lines[::7][:3000]


def bertpre_encode(path, texts):
    p = subprocess.run([bertpre, "tokenizer", "encode", "--model", path, "--json-lines"],
                       input="".join(json.dumps(t) + "\n" for t in texts), capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr
    return [[int(x) for x in line.split()] for line in p.stdout.split("\n")[:len(texts)]], ""


with tempfile.TemporaryDirectory() as tmp:
    tok, path = build(tmp)
    with open(path) as f:
        saved = json.load(f)
    merge_form = "pairs" if saved["model"]["merges"] and isinstance(saved["model"]["merges"][0], list) else "strings"
    print(f"tokenizers {tokenizers.__version__}: {tok.get_vocab_size()} ids, merges stored as {merge_form}")
    for name, texts in (("crafted", CRAFTED), ("held-back", held_back())):
        want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        got, err = bertpre_encode(path, texts)
        bad = [i for i in range(len(texts)) if got is None or got[i] != want[i]]
        detail = err if got is None else "\n".join(
            f"{texts[i]!r}\n  tokenizers {want[i]}\n  bertpre    {got[i]}" for i in bad[:3])
        expect(f"{name} texts ({len(texts)}, {sum(len(w) for w in want)} ids): bertpre's ids = tokenizers' "
               f"({len(bad)} differ)", not bad, detail)
    want = [tok.decode(e.ids, skip_special_tokens=False) for e in tok.encode_batch(CRAFTED, add_special_tokens=False)]
    ids = [e.ids for e in tok.encode_batch(CRAFTED, add_special_tokens=False)]
    p = subprocess.run([bertpre, "tokenizer", "decode", "--model", path],  # bytes: CR LF kept as written
                       input="".join(" ".join(map(str, i)) + "\n" for i in ids).encode(), capture_output=True)
    p.stdout, p.stderr = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    # one output line per text (a text's own newlines inside it): the whole output compared
    expected = "".join(w + "\n" for w in want)
    first = next((k for k in range(min(len(p.stdout), len(expected))) if p.stdout[k] != expected[k]), None)
    expect(f"decode: bertpre's text = tokenizers' for the {len(want)} crafted texts", p.returncode == 0
           and p.stdout == expected, p.stderr + (f"first difference at {first}: {p.stdout[first:first + 40]!r} vs "
                                                 f"{expected[first:first + 40]!r}" if first is not None else ""))
    p = subprocess.run([bertpre, "tokenizer", "info", "--model", path], capture_output=True, text=True)
    info = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    specials = {k: str(tok.token_to_id(f"[{k.upper()}]")) for k in ("pad", "unk", "cls", "sep", "mask")}
    expect(f"info: kind bpe, vocab_size {tok.get_vocab_size()}, special ids {specials}",
           p.returncode == 0 and info.get("kind") == "bpe" and info.get("vocab_size") == str(tok.get_vocab_size())
           and all(info.get(k) == v for k, v in specials.items()), p.stdout + p.stderr)

    def refused(what, edit, words):
        cfg = json.loads(json.dumps(saved))
        edit(cfg)
        bad_path = os.path.join(tmp, "bad.json")
        with open(bad_path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([bertpre, "tokenizer", "info", "--model", bad_path], capture_output=True, text=True)
        expect(f"{what}: exit 1 naming {words}", p.returncode == 1 and all(w in p.stderr for w in words)
               and bad_path in p.stderr, p.stderr)

    refused("a WordPiece model", lambda c: c["model"].update(type="WordPiece"), ["model.type", "WordPiece"])
    refused("byte_fallback", lambda c: c["model"].update(byte_fallback=True), ["byte_fallback"])
    refused("a Lowercase normalizer", lambda c: c.update(normalizer={"type": "Lowercase"}), ["normalizer", "Lowercase"])
    refused("a Metaspace pre-tokenizer", lambda c: c.update(pre_tokenizer={"type": "Metaspace"}),
            ["pre_tokenizer", "Metaspace"])
sys.exit(checks.exit_status())
