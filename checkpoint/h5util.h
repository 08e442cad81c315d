// h5util.h — small HDF5 helpers shared by the checkpoint code and the reshard tool.
#pragma once
#include <hdf5.h>
#include <stdint.h>
#include <stddef.h>
#include "common/util.h"
#include "comm/comm.h"

// Every function below checks every HDF5 call it makes: an error is a return value, never a crash here.

// File access with MPI-IO over the ranks of g (NULL: serial), file locking off unless the user set
// HDF5_USE_FILE_LOCKING. H5I_INVALID_HID on failure.
hid_t h5_fapl(const Group* g);
// Dataset transfer property: collective MPI-IO when `collective`. H5I_INVALID_HID on failure.
hid_t h5_dxpl(int collective);

// scalar attributes (replaced when present): 0 or -1
int h5_attr_write_str(hid_t obj, const char* name, const char* value);
int h5_attr_write_i64(hid_t obj, const char* name, long long value);
int h5_attr_write_u64(hid_t obj, const char* name, uint64_t value);
// Readers of one-value attributes: 0; -1 when the attribute is missing; -2 when it is malformed (another
// class or size, more than one value, a string longer than n - 1) or cannot be read. Strings may be
// fixed-length (as ringlm writes them) or variable-length (as h5py writes a str).
// Integers: any stored integer of up to 64 bits that fits the result (u64: 64-bit bit patterns).
int h5_attr_read_str(hid_t obj, const char* name, char* buf, size_t n);
int h5_attr_read_i64(hid_t obj, const char* name, long long* value);
int h5_attr_read_u64(hid_t obj, const char* name, uint64_t* value);
// "lacks" (-1) or "has a malformed (...)" (-2): for messages "'FILE' <problem> the attribute 'NAME'"
const char* h5_attr_problem(int rc);
// 1 when the link exists (every intermediate group too), 0 when not, -1 when HDF5 cannot tell (a corrupt file:
// callers that go on to open the object get the error there)
int h5_exists(hid_t loc, const char* path);

// The dataset checksum (xsum64): sum over elements of mix64(index * golden + bits) mod 2^64, where index is
// the element's row-major index in the logical tensor and bits its stored bit pattern (fp32: 32 bits,
// bf16: 16 bits). A sum, so ranks add partial sums over the parts they hold.
static inline uint64_t h5_xsum_term(uint64_t index, uint32_t bits) {
    return mix64(index * 0x9E3779B97F4A7C15ULL + bits);
}

// Select in `space` (a 2-D [R, Cc] logical dataspace) the elements of a row-major range of a shard:
// the shard is the block rows [row0, row0 + lr) x cols [col0, col0 + lc) of the logical tensor, and the
// range [a, b) counts elements of the shard row-major. Rows at or beyond R (vocabulary padding) are
// excluded. Returns the number of selected elements (the selection order matches the range order), or -1
// when HDF5 failed.
long long h5_select_shard_range(hid_t space, long R, long Cc, long row0, long col0, long lr, long lc,
                                long long a, long long b);


// fp32 <-> bf16 (round to nearest even)
uint16_t h5_f32_to_bf16(float x);
float h5_bf16_to_f32(uint16_t x);
