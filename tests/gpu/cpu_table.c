// cpu_table.c — the CPU backend's table (compiled with -include tests/gpu/cpu_names.h: every be_* / attn_* name
// below is the CPU backend's cpu_be_* / cpu_attn_*).
#include "tests/gpu/be_table.h"

#define BE_TABLE_INIT(f) f,
static const BeTable TABLE = { BE_TABLE_FUNCS(BE_TABLE_INIT) };
const BeTable* cpu_backend(void) { return &TABLE; }
