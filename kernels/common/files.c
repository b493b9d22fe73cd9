// Outputs refused before they are touched, written beside their final names and renamed
// into place (see files.h).
#include "kernels/common/files.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "kernels/common/check.h"

// The lock itself: flock on the whole file, or (slot >= 0) a POSIX lock on byte `slot` held by
// the open file (OFD), which other slots' holders do not conflict with.
static int lock_fd(int fd, int slot) {
    if (slot < 0) return flock(fd, LOCK_EX | LOCK_NB);
    struct flock range = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &range) == 0) return 0;
    if (errno == EACCES || errno == EAGAIN) errno = EWOULDBLOCK;
    return -1;
}

int dir_lock_take(dir_lock *l, const char *dir, const char *name, int create, const char *what, char *holder,
                  size_t holder_size) {
    return dir_lock_take_slot(l, dir, name, -1, create, what, holder, holder_size);
}

int dir_lock_take_slot(dir_lock *l, const char *dir, const char *name, int slot, int create, const char *what,
                       char *holder, size_t holder_size) {
    l->fd = -1;
    snprintf(l->path, sizeof l->path, "%s/%s", dir, name);
    if (holder_size) holder[0] = 0;
    int fd = open(l->path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (fd < 0 && !create && errno == ENOENT) return DIR_LOCK_ABSENT;
    if (fd < 0) fatal("%s: cannot open the lock file %s: %s", what, l->path, strerror(errno));
    if (lock_fd(fd, slot) != 0) {
        int saved = errno;
        if (saved == EWOULDBLOCK && holder_size) {
            ssize_t n = pread(fd, holder, holder_size - 1, 0);
            holder[n > 0 ? n : 0] = 0;
            holder[strcspn(holder, "\n")] = 0;
        }
        close(fd);
        errno = saved;
        return saved == EWOULDBLOCK ? DIR_LOCK_HELD : DIR_LOCK_UNSUPPORTED;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) fatal("%s: cannot read the lock file %s: %s", what, l->path, strerror(errno));
    l->fd = fd, l->dev = st.st_dev, l->ino = st.st_ino;
    // The file locked may have been removed by its last holder (dir_lock_remove) between the
    // open and the lock: then the lock guards nothing, and the path is opened again.
    if (!dir_lock_intact(l)) {
        dir_lock_release(l);
        return dir_lock_take_slot(l, dir, name, slot, create, what, holder, holder_size);
    }
    return DIR_LOCK_TAKEN;
}

void dir_lock_sign(const dir_lock *l) {
    char host[256] = "unknown", when[64] = "", text[600];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    int len = snprintf(text, sizeof text, "host %s, pid %d, started %s\n", host, (int)getpid(), when);
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, text, (size_t)len, 0) != len) return;
}

int dir_lock_intact(const dir_lock *l) {
    struct stat st;
    return l->fd < 0 || (stat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino);
}

void dir_lock_remove(dir_lock *l) {
    if (l->fd >= 0 && dir_lock_intact(l)) unlink(l->path);
    dir_lock_release(l);
}

void dir_lock_release(dir_lock *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
}

int remove_flat_dir(const char *path, char *failed, size_t size) {
    struct stat st;
    const char *bad = path;
    int ok = 1;
    char file[2300];
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        ok = unlink(path) == 0;
    } else {
        DIR *d = opendir(path);
        if (!d) return errno == ENOENT ? 0 : -1;
        for (struct dirent *e; ok && (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(file, sizeof file, "%s/%s", path, e->d_name);
            ok = unlink(file) == 0;
            if (!ok) bad = file;
        }
        int saved = errno;
        closedir(d);
        errno = saved;
        ok = ok && rmdir(path) == 0;
    }
    if (!ok && failed && size) snprintf(failed, size, "%s", bad);
    return ok ? 0 : -1;
}

int make_dirs_noted(const char *path, char (*made)[1100], int max_made, int *n_made, char *failed, size_t size) {
    char buf[1100];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {  // each parent, then the path itself
        if (*p && *p != '/') continue;
        char end = *p;
        *p = 0;
        if (mkdir(buf, 0777) == 0) {
            if (made && n_made && *n_made < max_made) snprintf(made[(*n_made)++], sizeof made[0], "%s", buf);
        } else if (errno != EEXIST) {
            int err = errno;
            if (failed && size) snprintf(failed, size, "%s", buf);
            return err;
        }
        *p = end;
        if (!end) return 0;
    }
}

void make_dirs(const char *path) {
    char failed[1100];
    int err = make_dirs_noted(path, NULL, 0, NULL, failed, sizeof failed);
    errno = err;
    if (err) check_file(0, failed, "creating the directory");
}

// The parent directory of `path` and its last component.
static void split_path(const char *path, char *parent, size_t parent_size, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(parent, parent_size, ".");
        *base = path;
    } else {
        snprintf(parent, parent_size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
        *base = slash + 1;
    }
}

static int fsync_named(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return -1;
    int ok = fsync(fd) == 0 || errno == EINVAL;  // a directory on a file system that cannot sync one
    int saved = errno;
    close(fd);
    errno = saved;
    return ok ? 0 : -1;
}

void staged_dir_check(const char *final, const char *what) {
    DIR *existing = opendir(final);
    if (existing) {
        for (struct dirent *e; (e = readdir(existing));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                fatal("%s '%s' is not empty (it holds %s); choose a new or empty directory", what, final, e->d_name);
        closedir(existing);
    } else if (errno != ENOENT) {
        fatal("%s '%s': %s", what, final, errno == ENOTDIR ? "a file, not a directory" : strerror(errno));
    }
}

// `path` without trailing slashes ("out/" is "out"), into buf.
static const char *trimmed(const char *path, char *buf, size_t size) {
    snprintf(buf, size, "%s", path);
    for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--) buf[n - 1] = 0;
    return buf;
}

void staged_dir_begin(const char *final, const char *what, int replace, char *tmp, size_t size) {
    if (!replace) staged_dir_check(final, what);
    char parent[1100], name[1100];
    const char *base;
    final = trimmed(final, name, sizeof name);
    split_path(final, parent, sizeof parent, &base);
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        fatal("%s '%s': name the directory itself (not '.', '..' or '/'): it is written beside and renamed into "
              "place", what, final);
    make_dirs(parent);
    snprintf(tmp, size, "%s/.tmp-%s.%d", parent, base, (int)getpid());
    remove_flat_dir(tmp, NULL, 0);  // what an earlier process of this pid left
    check_file(mkdir(tmp, 0777) == 0, tmp, "creating the temporary directory");
}

void staged_dir_abort(const char *tmp) {
    int saved = errno;
    remove_flat_dir(tmp, NULL, 0);
    errno = saved;
}

void staged_dir_commit(const char *tmp, const char *final, const char *what, int replace) {
    char path[2300], failed[2300] = "", name[1100], parent[1100], old[2300] = "";
    const char *base;
    final = trimmed(final, name, sizeof name);
    split_path(final, parent, sizeof parent, &base);
    DIR *d = opendir(tmp);
    int ok = d != NULL;
    snprintf(failed, sizeof failed, "%s", tmp);
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        ok = fsync_named(path, O_RDONLY) == 0;
        if (!ok) snprintf(failed, sizeof failed, "%s", path);
    }
    if (d) closedir(d);
    ok = ok && fsync_named(tmp, O_RDONLY | O_DIRECTORY) == 0;
    // One that exists is moved aside (an empty directory too: rename would replace it, but
    // a crash between would leave neither), and put back when the new one cannot go in.
    struct stat st;
    if (ok && replace && lstat(final, &st) == 0) {
        snprintf(old, sizeof old, "%s/.tmp-old-%s.%d", parent, base, (int)getpid());
        remove_flat_dir(old, NULL, 0);
        if (rename(final, old) != 0) ok = 0, old[0] = 0, snprintf(failed, sizeof failed, "%s", final);
    }
    if (ok && rename(tmp, final) != 0) ok = 0, snprintf(failed, sizeof failed, "%s", final);
    if (!ok) {
        int saved = errno;
        remove_flat_dir(tmp, NULL, 0);
        if (old[0]) rename(old, final);
        fatal("%s '%s': moving the finished files into place failed at %s: %s (the unfinished %s was removed; "
              "nothing under '%s' changed)", what, final, failed, strerror(saved), tmp, final);
    }
    if (old[0]) remove_flat_dir(old, NULL, 0);  // else the next writer of this directory removes it
    if (fsync_named(parent, O_RDONLY | O_DIRECTORY) != 0)
        fatal("%s '%s': fsync of its directory '%s' failed after the rename: %s", what, final, parent,
              strerror(errno));
}

void staged_file_name(const char *final, char *tmp, size_t size) {
    char parent[1100];
    const char *base;
    split_path(final, parent, sizeof parent, &base);
    snprintf(tmp, size, "%s/.tmp-%s.%d", parent, base, (int)getpid());
}

int staged_file_commit(const char *tmp, const char *final, int replace) {
    int ok = fsync_named(tmp, O_RDONLY) == 0;
    if (ok) ok = (replace ? rename(tmp, final) : link(tmp, final)) == 0;
    int saved = errno;
    unlink(tmp);
    if (ok) {
        char parent[1100];
        const char *base;
        split_path(final, parent, sizeof parent, &base);
        ok = fsync_named(parent, O_RDONLY | O_DIRECTORY) == 0;
        saved = errno;
    }
    errno = saved;
    return ok ? 0 : -1;
}

int write_all(int fd, const void *bytes, size_t size) {
    const char *p = bytes;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = ENOSPC;
            return -1;
        }
        p += n, size -= (size_t)n;
    }
    return 0;
}

int write_file_bytes(const char *path, const void *bytes, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int ok = write_all(fd, bytes, size) == 0;
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (!ok && saved) errno = saved;
    return ok ? 0 : -1;
}

const char *errno_text(int code, char *buf, size_t size) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
    const char *name = strerrorname_np(code);
#else
    const char *name = NULL;
#endif
    if (name) snprintf(buf, size, "%s (%s)", strerror(code), name);
    else snprintf(buf, size, "%s (errno %d)", strerror(code), code);
    return buf;
}

int same_file(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}
