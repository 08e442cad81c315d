// files.c — file-system helpers (see files.h).
#include "common/files.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

int make_dirs(const char* who, const char* path, char* err, size_t errlen) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char* p = buf + 1; ; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) {
            snprintf(err, errlen, "%s: cannot create '%s': %s", who, buf, strerror(errno));
            return 1;
        }
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) { snprintf(err, errlen, "%s: '%s' is not a directory", who, path); return 1; }
    return 0;
}

int fsync_path(const char* path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

const char* file_kind(unsigned mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a pipe (FIFO)" : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
         : S_ISSOCK(mode) ? "a socket" : S_ISLNK(mode) ? "a symbolic link" : S_ISREG(mode) ? "a regular file" : "not a regular file";
}

int open_regular(const char* who, const char* what, const char* path, int* fd, char* err, size_t errlen) {
    const char* sep = who && *who ? ": " : "";
    if (!who) who = "";
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   // (O_NONBLOCK: a FIFO must not block the open)
    if (*fd < 0) {
        int e = errno;
        struct stat ls;
        if ((e == ENOENT || e == ELOOP) && !lstat(path, &ls) && S_ISLNK(ls.st_mode))
            snprintf(err, errlen, "%s%s'%s' is a symbolic link to nothing (%s), not %s", who, sep, path,
                     e == ELOOP ? "a loop of links" : "its target does not exist", what);
        else snprintf(err, errlen, "%s%scannot open '%s': %s", who, sep, path, strerror(e));
        return 1;
    }
    struct stat st;
    if (fstat(*fd, &st)) { snprintf(err, errlen, "%s%scannot read '%s': %s", who, sep, path, strerror(errno)); close(*fd); return 1; }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s%s'%s' is %s, not %s", who, sep, path, file_kind(st.st_mode), what);
        close(*fd);
        return 1;
    }
    int fl = fcntl(*fd, F_GETFL);   // a regular file: blocking reads as usual
    if (fl >= 0) fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
    return 0;
}
