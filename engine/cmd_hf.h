// The Hugging Face interop subcommands: `bertpre export` (engine/cmd_export.c) writes a
// checkpoint as a directory that transformers loads with AutoModelForPreTraining and
// AutoTokenizer; `bertpre import` (engine/cmd_import.c) reads a BERT checkpoint in
// safetensors into a weights checkpoint to start training from.
#pragma once

// argv holds the arguments after the subcommand's name; each returns the exit status.
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
