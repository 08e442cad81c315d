// h5util.c — HDF5 helpers (see h5util.h).
#include "checkpoint/h5util.h"
#include "comm/comm_mpi.h"
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

hid_t h5_fapl(const Group* g) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return H5I_INVALID_HID;
    int bad = 0;
    if (g) {
        bad |= H5Pset_fapl_mpio(fapl, group_mpi(g), MPI_INFO_NULL) < 0;
        bad |= H5Pset_all_coll_metadata_ops(fapl, 1) < 0;
        bad |= H5Pset_coll_metadata_write(fapl, 1) < 0;
    }
    // HDF5's POSIX file locks fail on NFS-like file systems; a checkpoint is written by one job at a time,
    // so locking buys nothing. The HDF5_USE_FILE_LOCKING environment variable still overrides this.
    if (!getenv("HDF5_USE_FILE_LOCKING")) bad |= H5Pset_file_locking(fapl, 0, 1) < 0;
    // Files are created in the HDF5 1.8 format: its superblock, object headers (with the attributes in them),
    // heaps and v2 B-trees carry checksums that HDF5 verifies before it parses them, so a corrupt byte of that
    // metadata is an error, not a crash (checkpoint/FORMAT.md). Reading, the bound is irrelevant.
    bad |= H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST) < 0;
    if (bad) { H5Pclose(fapl); return H5I_INVALID_HID; }
    return fapl;
}

hid_t h5_dxpl(int collective) {
    hid_t d = H5Pcreate(H5P_DATASET_XFER);
    if (d >= 0 && collective && H5Pset_dxpl_mpio(d, H5FD_MPIO_COLLECTIVE) < 0) { H5Pclose(d); return H5I_INVALID_HID; }
    return d;
}

static int attr_write(hid_t obj, const char* name, hid_t type, const void* v) {
    htri_t ex = H5Aexists(obj, name);
    if (ex < 0 || (ex > 0 && H5Adelete(obj, name) < 0)) return -1;
    hid_t sp = H5Screate(H5S_SCALAR);
    if (sp < 0) return -1;
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, type, v) < 0 ? -1 : 0;
    if (a >= 0 && H5Aclose(a) < 0) rc = -1;
    H5Sclose(sp);
    return rc;
}

int h5_attr_write_str(hid_t obj, const char* name, const char* value) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    int rc = H5Tset_size(t, strlen(value) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0 ? -1
             : attr_write(obj, name, t, value);
    H5Tclose(t);
    return rc;
}
int h5_attr_write_i64(hid_t obj, const char* name, long long v) { int64_t x = v; return attr_write(obj, name, H5T_NATIVE_INT64, &x); }
int h5_attr_write_u64(hid_t obj, const char* name, uint64_t v) { return attr_write(obj, name, H5T_NATIVE_UINT64, &v); }

// Open attribute `name` of obj when it exists and holds exactly one value (scalar, or a 1-element simple
// dataspace); *type receives its stored type. 0, -1 (missing) or -2 (malformed or unreadable).
static int attr_open(hid_t obj, const char* name, hid_t* a, hid_t* type) {
    *a = *type = H5I_INVALID_HID;
    htri_t ex = H5Aexists(obj, name);
    if (ex == 0) return -1;
    if (ex < 0) return -2;
    if ((*a = H5Aopen(obj, name, H5P_DEFAULT)) < 0) return -2;
    hid_t sp = H5Aget_space(*a);
    H5S_class_t cl = sp < 0 ? H5S_NO_CLASS : H5Sget_simple_extent_type(sp);
    hssize_t np = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    if (sp >= 0) H5Sclose(sp);
    if ((cl != H5S_SCALAR && cl != H5S_SIMPLE) || np != 1 || (*type = H5Aget_type(*a)) < 0) {
        H5Aclose(*a); *a = H5I_INVALID_HID;
        return -2;
    }
    return 0;
}

int h5_attr_read_str(hid_t obj, const char* name, char* buf, size_t n) {
    hid_t a, ft;
    int rc = attr_open(obj, name, &a, &ft);
    if (rc) return rc;
    rc = -2;
    size_t sz = H5Tget_size(ft);
    htri_t vlen = H5Tget_class(ft) == H5T_STRING ? H5Tis_variable_str(ft) : -1;
    if (vlen > 0) {   // a variable-length string (as h5py writes str): accepted too
        hid_t mt = H5Tcopy(H5T_C_S1);
        char* p = NULL;
        if (mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Aread(a, mt, &p) >= 0 && p) {
            if (strlen(p) < n) { memcpy(buf, p, strlen(p) + 1); rc = 0; }
            H5free_memory(p);
        }
        if (mt >= 0) H5Tclose(mt);
    }
    if (vlen == 0 && sz > 0 && sz <= (1u << 20)) {
        // by its stored length: read as NULLPAD of the stored size into a buffer one longer, so that a string that
        // fills its size without a terminating NUL (h5py's np.bytes_) keeps its last character; after the first NUL
        // only padding may follow
        char* tmp = calloc(sz + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5T_cset_t cs = H5Tget_cset(ft);
        if (tmp && mt >= 0 && H5Tset_size(mt, sz) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 &&
            (cs < 0 || H5Tset_cset(mt, cs) >= 0) && H5Aread(a, mt, tmp) >= 0) {
            size_t l = strlen(tmp), j = l;
            while (j < sz && tmp[j] == 0) j++;
            if (j == sz && l < n) { memcpy(buf, tmp, l + 1); rc = 0; }
        }
        if (mt >= 0) H5Tclose(mt);
        free(tmp);
    }
    H5Tclose(ft); H5Aclose(a);
    return rc;
}

// an integer attribute of at most 64 bits into *v (as a bit pattern for `unsigned_out`); 0, -1 or -2
static int attr_read_int(hid_t obj, const char* name, uint64_t* v, int unsigned_out) {
    hid_t a, ft;
    int rc = attr_open(obj, name, &a, &ft);
    if (rc) return rc;
    rc = -2;
    size_t sz = H5Tget_size(ft);
    H5T_sign_t sg = H5Tget_sign(ft);
    if (H5Tget_class(ft) == H5T_INTEGER && sz >= 1 && sz <= 8 && sg >= 0) {
        if (sg == H5T_SGN_NONE) {
            uint64_t x = 0;
            if (H5Aread(a, H5T_NATIVE_UINT64, &x) >= 0 && (unsigned_out || x <= (uint64_t)INT64_MAX)) { *v = x; rc = 0; }
        } else {
            int64_t x = 0;
            if (H5Aread(a, H5T_NATIVE_INT64, &x) >= 0 && (!unsigned_out || sz == 8)) { memcpy(v, &x, 8); rc = 0; }
        }
    }
    H5Tclose(ft); H5Aclose(a);
    return rc;
}
int h5_attr_read_i64(hid_t obj, const char* name, long long* v) {
    uint64_t x = 0;
    int rc = attr_read_int(obj, name, &x, 0);
    if (!rc) { int64_t y; memcpy(&y, &x, 8); *v = y; }
    return rc;
}
int h5_attr_read_u64(hid_t obj, const char* name, uint64_t* v) { return attr_read_int(obj, name, v, 1); }

const char* h5_attr_problem(int rc) { return rc == -1 ? "lacks" : "has a malformed (wrong type, shape or size)"; }

int h5_exists(hid_t loc, const char* path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char* p = buf + 1; ; p++) {   // each prefix must exist before asking for the next
        if (*p == '/' || *p == 0) {
            char c = *p; *p = 0;
            htri_t ex = H5Lexists(loc, buf, H5P_DEFAULT);
            if (ex <= 0) return ex < 0 ? -1 : 0;
            *p = c;
            if (!c) return 1;
        }
    }
}


long long h5_select_shard_range(hid_t space, long R, long Cc, long row0, long col0, long lr, long lc,
                                long long a, long long b) {
    (void)Cc;
    if (H5Sselect_none(space) < 0) return -1;
    long valid_rows = R - row0 < lr ? R - row0 : lr;           // drop padded rows
    if (valid_rows < 0) valid_rows = 0;
    if (b > (long long)valid_rows * lc) b = (long long)valid_rows * lc;
    if (a >= b) return 0;
    if (H5Sget_simple_extent_ndims(space) == 1) {   // a 1-D tensor is a column: element index = row
        hsize_t s1 = row0 + a, c1 = b - a;
        return H5Sselect_hyperslab(space, H5S_SELECT_SET, &s1, NULL, &c1, NULL) < 0 ? -1 : b - a;
    }
    long long n = 0;
    int bad = 0;
    long r_first = (long)(a / lc), r_last = (long)((b - 1) / lc);
    hsize_t start[2], count[2];
    // partial first row, whole middle rows, partial last row: at most three rectangles
    long c_a = (long)(a % lc), c_b = (long)((b - 1) % lc) + 1;
    if (r_first == r_last) {
        start[0] = row0 + r_first; start[1] = col0 + c_a; count[0] = 1; count[1] = c_b - c_a;
        return H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL) < 0 ? -1 : c_b - c_a;
    }
    long mid0 = r_first, mid1 = r_last;                          // middle rows [mid0, mid1)
    if (c_a) {
        start[0] = row0 + r_first; start[1] = col0 + c_a; count[0] = 1; count[1] = lc - c_a;
        bad |= H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL) < 0;
        n += lc - c_a; mid0 = r_first + 1;
    }
    if (c_b == lc) mid1 = r_last + 1;
    if (mid1 > mid0) {
        start[0] = row0 + mid0; start[1] = col0; count[0] = mid1 - mid0; count[1] = lc;
        bad |= H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL) < 0;
        n += (long long)(mid1 - mid0) * lc;
    }
    if (c_b != lc) {
        start[0] = row0 + r_last; start[1] = col0; count[0] = 1; count[1] = c_b;
        bad |= H5Sselect_hyperslab(space, H5S_SELECT_OR, start, NULL, count, NULL) < 0;
        n += c_b;
    }
    return bad ? -1 : n;
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

