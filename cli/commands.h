// Subcommands that live in their own files; main() dispatches to them. Each parses its own
// options, prints its usage on --help, and returns the process exit status.
#pragma once

int cmd_tokenizer(int argc, char **argv);
int cmd_prep(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_gemm(int argc, char **argv);  // cmd_bench_gemm.c
// Hugging Face interop: export writes a checkpoint as a directory that transformers loads
// with AutoModelForPreTraining and AutoTokenizer (cmd_export.c); import reads a BERT
// checkpoint in safetensors into a weights checkpoint to train from (cmd_import.c).
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);

// Option values, checked: each exits with the option's name and the bad value on error.
int cli_int(const char *option, const char *value, long lo, long hi);
double cli_real(const char *option, const char *value, double lo, double hi);
// The value of option argv[*i] (advancing *i), or an error naming the option.
const char *cli_value(int argc, char **argv, int *i);
// rank and world size under mpirun (OMPI_COMM_WORLD_* or PMI_*); 0 and 1 otherwise.
void cli_mpi_rank(int *rank, int *world_size);
