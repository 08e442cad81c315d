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
