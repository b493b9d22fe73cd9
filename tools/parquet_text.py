#!/usr/bin/env python3
"""The text column of a Parquet file as JSON lines, streamed: what `bertpre prep --format
parquet` and `bertpre tokenizer train --format parquet` read Parquet files through (they start
this program per file and read its standard output).

    tools/parquet_text.py FILE --column NAME [--bad-rows stop|skip] [--arrow]

With --arrow, FILE is an Arrow IPC file, in the stream form (what `datasets`' save_to_disk
writes as data-NNNNN-of-NNNNN.arrow) or the file form, read a record batch at a time the same
way (`bertpre prep --format arrow`).

Writes {"NAME": text} for each row, in file order, one record batch at a time
(pyarrow.parquet.ParquetFile.iter_batches over the one column: memory holds a batch, not the
file), always in UTF-8 whatever the locale or PYTHONIOENCODING say. The column must hold
strings: string, large_string, string_view, or a dictionary of them (what a pandas Categorical
is written as); each row reads the same in all of them. A row whose value is null is a bad
row: --bad-rows stop (the default) ends with an error naming the file, the row and the column;
skip leaves it out with a warning (the first five named, then a count), as prep's --bad-lines
treats a bad JSON line. A file that is not Parquet, has no such column (the error lists the
columns it has) or several columns of that name, is an error.

Damage: page checksums are verified where the file has them (pyarrow writes them when asked,
write_page_checksum=True), so a damaged page is an error naming the file. A file written
without checksums cannot be verified: damage there is found only where it breaks the file's
structure, compression or encoding, or makes fewer rows than the footer counts; a flipped
byte inside a text can pass unseen. Whatever pyarrow raises on a damaged, cut-short or
unreadable file ends with one error line naming the file and the cause, exit status 1. Exit
status 0 when every row was written.
"""
import argparse
import json
import sys

import common

PROGRAM = "bertpre"  # its messages read as prep's own: the user ran bertpre


def fail(message):
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    sys.exit(1)


def one_line(e):
    """An exception's message on one line (pyarrow's may span several; prep's log wants one)."""
    return " ".join(str(e).split()) or type(e).__name__


def textual(pa, kind):
    """Whether the column's rows read as str: a dictionary column holds each distinct text once
    and its rows as indices into them, so its value type decides."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def arrow_batches(reader, column):
    """The column of each record batch of an Arrow IPC reader (stream: read to its end; file:
    batch by batch)."""
    if hasattr(reader, "num_record_batches"):
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i).column(column)
        return
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        yield batch.column(column)


def column_values(batches, args):
    """The column's values, a record batch at a time. pyarrow reports a damaged file with many
    kinds of exception (OSError, ArrowException, ValueError, IndexError, ...), from the batch
    and from its conversion alike: any of them there means the rows cannot be trusted."""
    row = 0
    while True:
        try:
            column = next(batches, None)
            if column is None:
                return
            values = column.to_pylist()
        except Exception as e:
            fail(f"{args.file}: reading the rows from {row} on failed ({one_line(e)}): the file is damaged, cut "
                 "short, or written in a form pyarrow cannot read")
        yield values
        row += len(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--column", default="text")
    ap.add_argument("--bad-rows", choices=["stop", "skip"], default="stop")
    ap.add_argument("--arrow", action="store_true", help="FILE is Arrow IPC (stream or file form), not Parquet")
    args = ap.parse_args()
    common.need(f"parquet_text (bertpre --format {'arrow' if args.arrow else 'parquet'})", "pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = None
    try:  # a damaged footer or schema raises here, of any kind (see column_values)
        if args.arrow:
            try:
                reader = pa.ipc.open_stream(pa.OSFile(args.file))
            except Exception:
                reader = pa.ipc.open_file(pa.OSFile(args.file))
            schema = reader.schema
        else:
            f = pq.ParquetFile(args.file, page_checksum_verification=True)
            schema = f.schema_arrow
        names = schema.names
    except Exception as e:
        fail(f"{args.file}: not a readable {'Arrow IPC' if args.arrow else 'Parquet'} file, or a damaged one "
             f"({one_line(e)})")
    if args.column not in names:
        fail(f"{args.file}: no column '{args.column}' (it has: {', '.join(names)}); --text-field names the column "
             "of the text")
    if names.count(args.column) > 1:
        fail(f"{args.file}: {names.count(args.column)} columns are named '{args.column}': which holds the text "
             "is not known")
    kind = schema.field(args.column).type
    if not textual(pa, kind):
        fail(f"{args.file}: column '{args.column}' holds {kind}, not strings")
    row, skipped = 0, 0
    out = sys.stdout.buffer  # bytes: the text goes out as UTF-8, not in the locale's encoding
    try:
        batches = (arrow_batches(reader, names.index(args.column)) if args.arrow else
                   (b.column(0) for b in f.iter_batches(columns=[args.column], batch_size=1024)))
        for values in column_values(batches, args):
            for text in values:
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
                    out.write(json.dumps({args.column: text}, ensure_ascii=False).encode("utf-8") + b"\n")
                row += 1
        out.flush()
    except BrokenPipeError:  # the reader stopped (its own error): nothing more to say
        sys.exit(1)
    if skipped > 5:
        print(f"{PROGRAM}: warning: {args.file}: {skipped} rows skipped in all (null '{args.column}')",
              file=sys.stderr)
    # A damaged row count in a row group's footer entry makes pyarrow read fewer rows, silently.
    if f is not None and row != f.metadata.num_rows:
        fail(f"{args.file}: {row} rows read where the file says it holds {f.metadata.num_rows}: the file is damaged")


if __name__ == "__main__":
    main()
