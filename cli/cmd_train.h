// The `bertpre train` subcommand (cli/cmd_train.c).
#pragma once

// argv holds the arguments after "train"; returns the exit status.
int cmd_train(int argc, char **argv);
