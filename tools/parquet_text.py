#!/usr/bin/env python3
"""The text column of a Parquet file as JSON lines, streamed: what `bertpre prep --format
parquet` and `bertpre tokenizer train --format parquet` read Parquet files through (they start
this program per file and read its standard output).

    tools/parquet_text.py FILE --column NAME [--bad-rows stop|skip]

Writes {"NAME": text} for each row, in file order, one record batch at a time
(pyarrow.parquet.ParquetFile.iter_batches over the one column: memory holds a batch, not the
file). The column must hold strings (string or large_string). A row whose value is null is a
bad row: --bad-rows stop (the default) ends with an error naming the file, the row and the
column; skip leaves it out with a warning (the first five named, then a count), as prep's
--bad-lines treats a bad JSON line. A file that is not Parquet, or has no such column (the
error lists the columns it has), is an error. Exit status 0 when every row was written.
"""
import argparse
import json
import sys

import common

PROGRAM = "bertpre"  # its messages read as prep's own: the user ran bertpre


def fail(message):
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--column", default="text")
    ap.add_argument("--bad-rows", choices=["stop", "skip"], default="stop")
    args = ap.parse_args()
    common.need("parquet_text (bertpre --format parquet)", "pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(args.file)
    except (OSError, pa.ArrowException) as e:
        fail(f"{args.file}: not a readable Parquet file ({e})")
    names = f.schema_arrow.names
    if args.column not in names:
        fail(f"{args.file}: no column '{args.column}' (it has: {', '.join(names)}); --text-field names the column "
             "of the text")
    kind = f.schema_arrow.field(args.column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        fail(f"{args.file}: column '{args.column}' holds {kind}, not strings")
    row, skipped = 0, 0
    out = sys.stdout
    try:
        for batch in f.iter_batches(columns=[args.column], batch_size=1024):
            for text in batch.column(0).to_pylist():
                if text is None:
                    if args.bad_rows == "stop":
                        fail(f"{args.file}: row {row}: column '{args.column}' is null (--bad-lines skip passes over "
                             "such rows)")
                    skipped += 1
                    if skipped <= 5:
                        print(f"{PROGRAM}: warning: {args.file}: row {row}: column '{args.column}' is null: row "
                              f"skipped{' (further skipped rows are only counted)' if skipped == 5 else ''}",
                              file=sys.stderr)
                else:
                    out.write(json.dumps({args.column: text}, ensure_ascii=False))
                    out.write("\n")
                row += 1
        out.flush()
    except BrokenPipeError:  # the reader stopped (its own error): nothing more to say
        sys.exit(1)
    except pa.ArrowException as e:
        fail(f"{args.file}: reading row {row} failed ({e}): a damaged Parquet file")
    if skipped > 5:
        print(f"{PROGRAM}: warning: {args.file}: {skipped} rows skipped in all (null '{args.column}')",
              file=sys.stderr)


if __name__ == "__main__":
    main()
