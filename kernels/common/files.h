// How bertpre writes what it leaves behind (checkpoints, shards, tokenizer models, exports,
// result files), the ground floor below tokenizer/, data/ and engine/ (ARCHITECTURE.md §3):
// refused before anything is touched, written beside its final name, fsynced, renamed into
// place when complete, its directory fsynced. The pieces:
//   - a lock file that one process holds for its life, with a check that the file locked is
//     still the one on disk (a directory removed with `rm -rf` takes its lock file along);
//   - a directory written under a hidden temporary sibling name and renamed when whole;
//   - a file written under a hidden temporary name and moved into place, never over an
//     existing file unless told to;
//   - mkdir -p, the removal of a directory bertpre wrote, and whether two paths name one
//     file (an output that names an input).
// A file that crosses this floor is either whole under its final name or absent; the one
// exception is the metrics file, a log appended a line at a time (docs/RELIABILITY.md).
#pragma once
#include <stddef.h>
#include <sys/types.h>

// ---- One process per directory: an exclusive flock on DIR/NAME, held until the process ends.
typedef struct {
    int fd;  // -1: none held
    dev_t dev;
    ino_t ino;
    char path[1200];
} dir_lock;
enum {
    DIR_LOCK_TAKEN = 0,        // held by this process now
    DIR_LOCK_HELD = 1,         // another process holds it: `holder` says who ("host H, pid P, started T")
    DIR_LOCK_UNSUPPORTED = 2,  // the file system refuses flock (errno set); nothing is held
    DIR_LOCK_ABSENT = 3,       // no lock file, and `create` was 0: nobody holds the directory
};
// Opens (with `create`, creates) DIR/NAME and tries the lock without waiting; a failure to
// open it is an error naming `what` and the path. `dir` must exist.
int dir_lock_take(dir_lock *l, const char *dir, const char *name, int create, const char *what, char *holder,
                  size_t holder_size);
// The same with a lock on byte `slot` of the file only: the processes of one job (ranks)
// each hold their own slot, and a second job's process is refused at the slot it shares.
int dir_lock_take_slot(dir_lock *l, const char *dir, const char *name, int slot, int create, const char *what,
                       char *holder, size_t holder_size);
// Writes "host H, pid P, started T" into the held lock file, for the message of a second
// process (a failed write is ignored: the lock holds without it).
void dir_lock_sign(const dir_lock *l);
// 1 while the path of a held lock still names the file that is locked; 0 when it was removed
// or replaced (its directory deleted and made again): another process may hold the new one.
int dir_lock_intact(const dir_lock *l);
void dir_lock_release(dir_lock *l);
// Removes the lock file, then lets the lock go: for a directory that one process alone holds
// (a process that opened the file meanwhile sees it gone once it has the lock, and opens the
// path again).
void dir_lock_remove(dir_lock *l);

// ---- A directory written whole or not at all.
// An error naming `final` when it exists and is not an empty directory (its first entry
// named): the check to make before any work, again made by staged_dir_begin.
void staged_dir_check(const char *final, const char *what);
// Makes the empty temporary sibling PARENT/.tmp-BASE.PID of `final` into tmp[size], where the
// files are to be written, its parents created. Unless `replace`, `final` must not exist or
// be an empty directory (an error names it, or its first entry, before anything is written).
void staged_dir_begin(const char *final, const char *what, int replace, char *tmp, size_t size);
// Every file in tmp fsynced, tmp fsynced and renamed to `final`, the parent fsynced. An
// existing `final` (an empty directory, or with `replace` any directory bertpre wrote) is
// moved aside to PARENT/.tmp-old-BASE.PID first and removed after, so that a crash between
// the renames leaves one of the two whole. A failure removes tmp and is an error naming the
// path.
void staged_dir_commit(const char *tmp, const char *final, const char *what, int replace);
// Removes tmp after a failed write into it, keeping errno: what staged_dir_commit would have
// moved into place is gone, and a retry has the space back.
void staged_dir_abort(const char *tmp);
// Removes a directory and the files in it (one level: what bertpre writes there): 0, or -1
// with errno set (the path that failed in failed[size] when given).
int remove_flat_dir(const char *path, char *failed, size_t size);
// Creates directory `path` and its missing parents (mkdir -p); a failure is an error naming
// the directory (check_file).
void make_dirs(const char *path);
// The same without exiting: 0, or the errno of the first failure with the directory that
// failed in failed[size]; the directories it created, parents first, go to made[0 .. *n_made)
// (at most max_made noted; made may be NULL).
int make_dirs_noted(const char *path, char (*made)[1100], int max_made, int *n_made, char *failed, size_t size);

// ---- A file written under a temporary name beside it (DIR/.tmp-BASE.PID), then put in place.
void staged_file_name(const char *final, char *tmp, size_t size);
// fsyncs tmp (a file written under any temporary name in the directory of `final`), then
// moves it to `final` (linked: an existing `final` fails with EEXIST unless `replace`),
// fsyncs the directory. 0, or -1 with errno set; tmp is removed either way.
int staged_file_commit(const char *tmp, const char *final, int replace);
// Writes `bytes` to `path` (created, truncated): 0, or -1 with errno set. The commit that
// puts it in place (staged_file_commit, staged_dir_commit) fsyncs it.
int write_file_bytes(const char *path, const void *bytes, size_t size);
// Writes all of `bytes` to fd (through short writes and EINTR): 0, or -1 with errno set.
int write_all(int fd, const void *bytes, size_t size);

// An errno as its text and name: "No space left on device (ENOSPC)" (the number where the C
// library has no name for it). Returns buf.
const char *errno_text(int code, char *buf, size_t size);

// 1 when both paths exist and name the same file (device and inode).
int same_file(const char *a, const char *b);
