// h5util.c — HDF5 helpers (see h5util.h).
#include "checkpoint/h5util.h"
#include "comm/comm_mpi.h"
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

hid_t h5_fapl(const Group* g) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (g) {
        H5Pset_fapl_mpio(fapl, group_mpi(g), MPI_INFO_NULL);
        H5Pset_all_coll_metadata_ops(fapl, 1);
        H5Pset_coll_metadata_write(fapl, 1);
    }
    // HDF5's POSIX file locks fail on NFS-like file systems; a checkpoint is written by one job at a time,
    // so locking buys nothing. The HDF5_USE_FILE_LOCKING environment variable still overrides this.
    if (!getenv("HDF5_USE_FILE_LOCKING")) H5Pset_file_locking(fapl, 0, 1);
    return fapl;
}

hid_t h5_dxpl(int collective) {
    hid_t d = H5Pcreate(H5P_DATASET_XFER);
    if (collective) H5Pset_dxpl_mpio(d, H5FD_MPIO_COLLECTIVE);
    return d;
}

static int attr_write(hid_t obj, const char* name, hid_t type, const void* v) {
    if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, type, v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int h5_attr_write_str(hid_t obj, const char* name, const char* value) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = attr_write(obj, name, t, value);
    H5Tclose(t);
    return rc;
}
int h5_attr_write_i64(hid_t obj, const char* name, long long v) { int64_t x = v; return attr_write(obj, name, H5T_NATIVE_INT64, &x); }
int h5_attr_write_u64(hid_t obj, const char* name, uint64_t v) { return attr_write(obj, name, H5T_NATIVE_UINT64, &v); }

int h5_attr_read_str(hid_t obj, const char* name, char* buf, size_t n) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a);
    int rc = -1;
    if (H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft)) {
        size_t sz = H5Tget_size(ft);
        char* tmp = calloc(sz + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, sz);
        if (H5Aread(a, mt, tmp) >= 0) { snprintf(buf, n, "%s", tmp); rc = 0; }
        H5Tclose(mt); free(tmp);
    }
    H5Tclose(ft); H5Aclose(a);
    return rc;
}

static int attr_read(hid_t obj, const char* name, hid_t type, void* v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    int rc = H5Aread(a, type, v) < 0 ? -1 : 0;
    H5Aclose(a);
    return rc;
}
int h5_attr_read_i64(hid_t obj, const char* name, long long* v) {
    int64_t x = 0; int rc = attr_read(obj, name, H5T_NATIVE_INT64, &x); *v = x; return rc;
}
int h5_attr_read_u64(hid_t obj, const char* name, uint64_t* v) { return attr_read(obj, name, H5T_NATIVE_UINT64, v); }

int h5_exists(hid_t loc, const char* path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char* p = buf + 1; ; p++) {   // each prefix must exist before asking for the next
        if (*p == '/' || *p == 0) {
            char c = *p; *p = 0;
            if (H5Lexists(loc, buf, H5P_DEFAULT) <= 0) return 0;
            *p = c;
            if (!c) return 1;
        }
    }
}


long long h5_select_shard_range(hid_t space, long R, long Cc, long row0, long col0, long lr, long lc,
                                long long a, long long b) {
    (void)Cc;
    H5Sselect_none(space);
    long valid_rows = R - row0 < lr ? R - row0 : lr;           // drop padded rows
    if (valid_rows < 0) valid_rows = 0;
    if (b > (long long)valid_rows * lc) b = (long long)valid_rows * lc;
    if (a >= b) return 0;
    if (H5Sget_simple_extent_ndims(space) == 1) {   // a 1-D tensor is a column: element index = row
        hsize_t s1 = row0 + a, c1 = b - a;
        H5Sselect_hyperslab(space, H5S_SELECT_SET, &s1, NULL, &c1, NULL);
        return b - a;
    }
    long long n = 0;
    long r_first = (long)(a / lc), r_last = (long)((b - 1) / lc);
    hsize_t start[2], count[2];
    // partial first row, whole middle rows, partial last row: at most three rectangles
    long c_a = (long)(a % lc), c_b = (long)((b - 1) % lc) + 1;
    if (r_first == r_last) {
        start[0] = row0 + r_first; start[1] = col0 + c_a; count[0] = 1; count[1] = c_b - c_a;
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        return c_b - c_a;
    }
    long mid0 = r_first, mid1 = r_last;                          // middle rows [mid0, mid1)
    if (c_a) {
        start[0] = row0 + r_first; start[1] = col0 + c_a; count[0] = 1; count[1] = lc - c_a;
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        n += lc - c_a; mid0 = r_first + 1;
    }
    if (c_b == lc) mid1 = r_last + 1;
    if (mid1 > mid0) {
        start[0] = row0 + mid0; start[1] = col0; count[0] = mid1 - mid0; count[1] = lc;
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        n += (long long)(mid1 - mid0) * lc;
    }
    if (c_b != lc) {
        start[0] = row0 + r_last; start[1] = col0; count[0] = 1; count[1] = c_b;
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL);
        n += c_b;
    }
    return n;
}

uint16_t h5_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float h5_bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

