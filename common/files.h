// files.h — small file-system helpers shared by the programs.
#pragma once
#include <stddef.h>

// mkdir -p PATH; then PATH must be a directory. Returns 0, or 1 with one line in err naming the part that
// failed, prefixed with `who` (e.g. "train").
int make_dirs(const char* who, const char* path, char* err, size_t errlen);
// fsync a file or directory by path (0, or -1 with errno)
int fsync_path(const char* path);
// What a file of mode `mode` (st_mode) is, for messages: "a directory", "a pipe", "a device", "a socket", ...
const char* file_kind(unsigned mode);
// Open an existing regular file for reading, without blocking on a FIFO: 0 with *fd (close it), or 1 with one
// line in err — "WHO: cannot open 'PATH': REASON", or "WHO: 'PATH' is a pipe, not WHAT" for anything but a
// regular file (a directory, a FIFO, a device, a socket), or a symbolic link to nothing (dangling, or a loop).
// who NULL or "": no prefix.
int open_regular(const char* who, const char* what, const char* path, int* fd, char* err, size_t errlen);
