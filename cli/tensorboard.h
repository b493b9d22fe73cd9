// TensorBoard event files written as training goes (train.tensorboard_dir), so that
// `tensorboard --logdir DIR` shows a run while it runs: every line of the metrics file becomes
// one event at the line's step holding each numeric field as a scalar, "train/FIELD" (or
// "eval/FIELD" for the held-out evaluation's lines), as tools/plot_metrics.py --tensorboard
// names them after the run.
//
// The file is TensorBoard's own format, written here without TensorFlow: TFRecord records
// (length, masked CRC-32C of the length, the bytes, their masked CRC-32C) each holding an
// Event protocol buffer (wall_time, step, and a Summary of simple_value scalars; the first
// record the file_version "brain.Event:2"). One new file per process start, named as TensorBoard
// expects (DIR/events.out.tfevents.SECONDS.HOST.PID, with .1, .2, ... where that name is taken:
// no file already there is opened); a resumed run writes a new one beside the first, and
// TensorBoard reads both. Each event is flushed as it is written.
#pragma once
#include <jansson.h>
#include <stdint.h>

typedef struct tb_writer tb_writer;

// Creates DIR (and its parents) and the run's event file in it; exits naming
// train.tensorboard_dir and the path when either cannot be made.
tb_writer *tb_open(const char *dir);
// What tb_open checks, without making anything (train --dry-run): the nearest existing folder
// on DIR's path is a folder that this process can write.
void tb_check(const char *dir);
// The numeric fields of a metrics-file line as one event (booleans, nulls, "step" and "eval"
// itself left out): 0, or the errno of a failed write.
int tb_write_line(tb_writer *w, const json_t *line);
// Closes the file: 0, or the errno of a failure.
int tb_close(tb_writer *w);
// The file being written (for messages).
const char *tb_path(const tb_writer *w);
// CRC-32C (Castagnoli) of n bytes, and TFRecord's masked form of a CRC.
uint32_t tb_crc32c(const void *data, size_t n);
uint32_t tb_masked_crc(uint32_t crc);
