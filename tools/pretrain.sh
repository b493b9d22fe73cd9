#!/bin/sh
# Pretrains a BERT on your own text, or continues pretraining a transformers BERT: tools/pretrain.py
# (its --help says how); python3 of the standard library suffices.
exec python3 "$(dirname "$0")/pretrain.py" "$@"
