"""Run by test_interop.py inside another Python environment (the current transformers line,
.venv-hf5): loads an exported model directory with AutoTokenizer, as a user of that
environment does, and prints one JSON object: the versions, whether torch and sentencepiece
can be imported there, the tokenizer's class, the ids of each line of LINES_JSON (no special
tokens added) and the encoding of one sentence pair.

usage: hf_tokenizer_ids.py MODEL_DIR LINES_JSON
"""
import importlib.util
import json
import sys
import warnings

warnings.filterwarnings("ignore")
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
directory, lines_path = sys.argv[1], sys.argv[2]
with open(lines_path, encoding="utf-8") as f:
    lines = json.load(f)
tok = transformers.AutoTokenizer.from_pretrained(directory)
pair = tok("The first sentence.", "A second one, with [MASK] in it.")
print(json.dumps({
    "transformers": transformers.__version__,
    "torch": importlib.util.find_spec("torch") is not None,
    "sentencepiece": importlib.util.find_spec("sentencepiece") is not None,
    "class": type(tok).__name__,
    "mask_token_id": tok.mask_token_id,
    "ids": [tok(line, add_special_tokens=False)["input_ids"] for line in lines],
    "pair": {k: list(v) for k, v in pair.items()},
}))
