// dump.h — a plain binary dump of named tensors, read by the Python test references (tests/ref_model.py,
// tests/compare_dumps.py). Little-endian: magic "RLMDUMP1", then records until EOF:
//   int32 name_len, name bytes, int32 dtype (0 float32, 1 int32, 2 utf-8 text), int32 ndim, int32 dims[ndim],
//   then the elements (4 bytes each; 1 byte for text).
#pragma once
#include <stdio.h>
#include "model/model.h"

FILE* dump_open(const char* path);     // NULL on failure (errno set)
void dump_record(FILE* f, const char* name, int dtype, int ndim, const int* dims, const void* data);
// every tensor of the table from `arena` (a parameter-shaped backend arena) as PREFIX/<HF name>, with its
// full logical shape: collective over the model's TP group (shards are gathered to TP rank 0); f is
// written only where non-NULL (a TP rank 0)
void dump_arena(FILE* f, const Model* m, const char* prefix, const float* arena);
