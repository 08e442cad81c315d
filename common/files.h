// files.h — small file-system helpers shared by the programs.
#pragma once
#include <stddef.h>

// mkdir -p PATH; then PATH must be a directory. Returns 0, or 1 with one line in err naming the part that
// failed, prefixed with `who` (e.g. "train").
int make_dirs(const char* who, const char* path, char* err, size_t errlen);
// fsync a file or directory by path (0, or -1 with errno)
int fsync_path(const char* path);
