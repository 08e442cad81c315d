// cudnn_sdpa.cu — cuDNN's fused attention for one block through the graph (backend) C API (see cudnn_sdpa.h).
//
// The graphs are the ones cuDNN's fused flash-attention engines match (the form cuDNN's frontend expands its
// sdpa / sdpa_backward nodes into), in 4-D [batch, head, row, column] tensors of batch 1:
//   forward   S = Q KT (fp32) -> * scale -> [causal: row + (Skv - Sq) >= col, else -FLT_MAX] -> softmax:
//             M = max_col S, E = exp(S - M), Z = sum_col E, Stats = M + log Z, P = E / Z (bf16) -> O = P V (bf16)
//   backward  Dsum = sum_d(dO * O) * 1 (fp32, workspace); S as above; E = exp(S * scale - Stats) [masked];
//             dV = E^T dO; dS = (dO VT - Dsum) * E * scale; dK = dS^T Q; dQacc += dS K (fp32, workspace),
//             dQ = identity(dQacc) (bf16); with Hk < H, dV and dK are summed over each group of H / Hk heads by a
//             reduction from full-head [1, H, Skv, D] intermediates.
// The dQ accumulator: a non-virtual FLOAT matmul output is how cuDNN 9's fused backward is told to add dQ with fp32
// atomics across key tiles (into it, not over it). So it is zeroed on the handle's stream before EVERY backward
// execution (cudnn-frontend registers the same memset as a workspace modification of its sdpa_backward node;
// TransformerEngine's backend-API graph calls cudaMemsetAsync before each backward), and it carries the tensor
// reordering mode the frontend sets on it (CUDNN_TENSOR_REORDERING_F16x16: cuDNN keeps it in its own 16x16 order,
// which only ringlm's zeroing and cuDNN's own identity op to dQ ever touch). Dsum is written, not accumulated ("no
// requirement ... to be memset", the frontend's note on it).
// Scalars (scale, the mask fill -FLT_MAX, 1, the alignment offset Skv - Sq as the pair Skv, Sq) are pass-by-value
// tensors whose host addresses go into the variant pack; the mask fill is the frontend's (the lowest finite float,
// not -inf: what the engines are exercised with). Every descriptor call is checked; the first failure is kept with
// cuDNN's own message.
#include "backend/cuda/cudnn_sdpa.h"
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <vector>
extern "C" {
#include "common/files.h"
}

// ---------------------------------------------------------------------------------------------------------
// loading

int cudnn_api_load(CudnnApi* api, char* err, size_t errlen) {
    memset(api, 0, sizeof *api);
    const char* env = getenv("RINGLM_CUDNN_LIB");
    const char* path = env && *env ? env : "libcudnn.so.9";
    snprintf(api->path, sizeof api->path, "%s", path);
    // what dlopen would open must be a regular file: it blocks for ever on a FIFO (no timeout reaches it, no signal
    // ends it) and fails obscurely on a directory or a device. A path is checked as given; a bare name in each folder
    // of LD_LIBRARY_PATH, where the loader looks first (the system's folders hold what the package manager put there).
    // What does not exist is left to dlopen's own message.
    const char* found = strchr(path, '/') ? path : NULL;
    char cand[4096 + 64];
    if (!found && getenv("LD_LIBRARY_PATH")) {
        char dirs[4096];
        snprintf(dirs, sizeof dirs, "%s", getenv("LD_LIBRARY_PATH"));
        for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
            snprintf(cand, sizeof cand, "%s/%s", d, path);
            struct stat st;
            if (!stat(cand, &st)) found = cand;   // the loader takes the first it finds
        }
    }
    struct stat st;
    if (found && !stat(found, &st) && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s '%s'%s is %s, not a shared library", env && *env ? "RINGLM_CUDNN_LIB" : "cuDNN", found,
                 found == cand ? " (found through LD_LIBRARY_PATH)" : "", file_kind(st.st_mode));
        return 1;
    }
    dlerror();
    api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) {
        const char* why = dlerror();
        snprintf(err, errlen, "cannot load %s (%s)%s", path, why ? why : "dlopen failed",
                 env && *env ? "" : "; install cuDNN 9 or name the library with RINGLM_CUDNN_LIB");
        return 1;
    }
#define SYM(field, name)                                                                            \
    do {                                                                                            \
        *(void**)&api->field = dlsym(api->lib, name);                                               \
        if (!api->field) {                                                                          \
            snprintf(err, errlen, "%s lacks %s: not a cuDNN 9 library", path, name);                \
            dlclose(api->lib);                                                                      \
            api->lib = NULL;                                                                        \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)
    SYM(GetVersion, "cudnnGetVersion");
    SYM(GetErrorString, "cudnnGetErrorString");
    SYM(Create, "cudnnCreate");
    SYM(Destroy, "cudnnDestroy");
    SYM(SetStream, "cudnnSetStream");
    SYM(GetStream, "cudnnGetStream");
    SYM(CreateDescriptor, "cudnnBackendCreateDescriptor");
    SYM(DestroyDescriptor, "cudnnBackendDestroyDescriptor");
    SYM(Finalize, "cudnnBackendFinalize");
    SYM(SetAttribute, "cudnnBackendSetAttribute");
    SYM(GetAttribute, "cudnnBackendGetAttribute");
    SYM(Execute, "cudnnBackendExecute");
#undef SYM
    *(void**)&api->GetLastErrorString = dlsym(api->lib, "cudnnGetLastErrorString");   // optional
    api->version = api->GetVersion();
    if (api->version < SDPA_CUDNN_MIN_VERSION) {
        size_t v = api->version;   // 8.x numbers itself major * 1000 + minor * 100 + patch
        snprintf(err, errlen, "%s is cuDNN %zu.%zu.%zu, older than 9.0 (its fused attention graphs)", path, v / 1000,
                 v / 100 % 10, v % 100);
        dlclose(api->lib);
        api->lib = NULL;
        return 1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------------------
// the graph builder: descriptors with checked calls; the first failure is kept

namespace {

struct Tensor {
    cudnnBackendDescriptor_t d = NULL;
    int64_t uid = 0;
};

// the non-virtual tensors of the graphs (the variant pack's entries)
enum { T_Q, T_K, T_V, T_O, T_STATS, T_DO, T_DQ, T_DK, T_DV, T_DSUM, T_DQACC, T_SCALE, T_FILL, T_ONE, T_SKV, T_SQ,
       T_COUNT };

struct Builder {
    const CudnnApi* A;
    std::vector<cudnnBackendDescriptor_t> all;   // every descriptor made (destroyed with the plan)
    int64_t next_uid = 100;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    char what[160] = "";
    char detail[400] = "";

    bool ok() const { return st == CUDNN_STATUS_SUCCESS; }
    void fail(cudnnStatus_t s, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
        if (!ok()) return;
        st = s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        detail[0] = 0;
        if (A->GetLastErrorString) A->GetLastErrorString(detail, sizeof detail);
    }
    cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char* name) {
        cudnnBackendDescriptor_t d = NULL;
        if (!ok()) return NULL;
        cudnnStatus_t s = A->CreateDescriptor(t, &d);
        if (s != CUDNN_STATUS_SUCCESS) { fail(s, "cudnnBackendCreateDescriptor (%s)", name); return NULL; }
        all.push_back(d);
        return d;
    }
    void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
             const void* v, const char* name) {
        if (!ok()) return;
        cudnnStatus_t s = A->SetAttribute(d, a, t, n, v);
        if (s != CUDNN_STATUS_SUCCESS) fail(s, "cudnnBackendSetAttribute (%s, attribute %d)", name, (int)a);
    }
    void fin(cudnnBackendDescriptor_t d, const char* name) {
        if (!ok()) return;
        cudnnStatus_t s = A->Finalize(d);
        if (s != CUDNN_STATUS_SUCCESS) fail(s, "cudnnBackendFinalize (%s)", name);
    }
    void desc_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendDescriptor_t v, const char* name) {
        set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, name);
    }

    // a 4-D tensor; uid > 0: that uid (a variant-pack entry), else a fresh one; reorder: its tensor reordering mode
    Tensor tensor(const int64_t dims[4], const int64_t strides[4], cudnnDataType_t dt, bool is_virtual,
                  bool by_value = false, int64_t uid = 0,
                  cudnnBackendTensorReordering_t reorder = CUDNN_TENSOR_REORDERING_NONE) {
        Tensor t;
        t.uid = uid > 0 ? uid : next_uid++;
        t.d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
        int64_t align = 16;
        bool v = is_virtual, bv = by_value;
        set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
        set(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dimensions");
        set(t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
        set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, "tensor uid");
        set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
        set(t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor virtual");
        if (by_value) set(t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv, "tensor by value");
        if (reorder != CUDNN_TENSOR_REORDERING_NONE)
            set(t.d, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reorder, "tensor reordering");
        fin(t.d, "tensor");
        return t;
    }
    Tensor scalar(cudnnDataType_t dt, int64_t uid) {
        const int64_t one[4] = { 1, 1, 1, 1 };
        return tensor(one, one, dt, false, true, uid);
    }
    // a virtual intermediate [d0, d1, d2, d3] with the given strides
    Tensor virt(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                cudnnDataType_t dt = CUDNN_DATA_FLOAT) {
        const int64_t dims[4] = { d0, d1, d2, d3 }, strides[4] = { s0, s1, s2, s3 };
        return tensor(dims, strides, dt, true);
    }

    // y = mode(x[, b[, t]]); axis >= 0 for GEN_INDEX
    void pw(cudnnPointwiseMode_t mode, const Tensor& x, const Tensor* b, const Tensor* t, const Tensor& y,
            cudnnDataType_t comp = CUDNN_DATA_FLOAT, int64_t axis = -1) {
        cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
        set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
        set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &comp, "pointwise precision");
        if (axis >= 0) set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
        fin(p, "pointwise");
        cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
        desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p, "pointwise operation descriptor");
        desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.d, "pointwise x");
        float one = 1.0f;
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
        if (b) desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->d, "pointwise b");
        if (t) desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->d, "pointwise t");
        desc_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.d, "pointwise y");
        fin(op, "pointwise operation");
        ops.push_back(op);
    }
    void matmul(const Tensor& a, const Tensor& b, const Tensor& c) {
        cudnnBackendDescriptor_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
        cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul precision");
        fin(m, "matmul");
        cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
        desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.d, "matmul a");
        desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.d, "matmul b");
        desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.d, "matmul c");
        desc_attr(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, "matmul descriptor");
        fin(op, "matmul operation");
        ops.push_back(op);
    }
    void reduce(cudnnReduceTensorOp_t how, const Tensor& x, const Tensor& y) {
        cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
        cudnnDataType_t comp = CUDNN_DATA_FLOAT;
        set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "reduction operator");
        set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction precision");
        fin(r, "reduction");
        cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
        desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction descriptor");
        desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.d, "reduction x");
        desc_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.d, "reduction y");
        fin(op, "reduction operation");
        ops.push_back(op);
    }
    void reshape(const Tensor& x, const Tensor& y) {
        cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
        desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.d, "reshape x");
        desc_attr(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.d, "reshape y");
        fin(op, "reshape operation");
        ops.push_back(op);
    }
    std::vector<cudnnBackendDescriptor_t> ops;
};

}   // namespace

struct SdpaPlan {
    SdpaShape s;
    std::vector<cudnnBackendDescriptor_t> descs;
    cudnnBackendDescriptor_t plan;
    int64_t uid[T_COUNT];
    float scale, fill, one;
    int32_t skv, sq;
    int64_t engine;
    size_t ws_cudnn, off_dsum, off_dqacc, off_cudnn, ws_total;
};

static size_t align256(size_t x) { return (x + 255) / 256 * 256; }

// The causal mask on a [1, H, Sq, Skv] score tensor x: row + (Skv - Sq) >= col, else -FLT_MAX (bottom-right). Sq = Skv
// is the plain top-left mask (no offset ops).
static Tensor causal_mask(Builder& g, SdpaPlan* p, const Tensor& x) {
    const SdpaShape& s = p->s;
    int64_t H = s.H, Sq = s.Sq, Skv = s.Skv;
    Tensor row = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_INT32);
    Tensor col = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_INT32);
    g.pw(CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, row, CUDNN_DATA_FLOAT, 2);
    g.pw(CUDNN_POINTWISE_GEN_INDEX, x, NULL, NULL, col, CUDNN_DATA_FLOAT, 3);
    Tensor r = row;
    if (Skv != Sq) {
        Tensor skv = g.scalar(CUDNN_DATA_INT32, p->uid[T_SKV]), sq = g.scalar(CUDNN_DATA_INT32, p->uid[T_SQ]);
        Tensor r1 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_INT32);
        Tensor r2 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_INT32);
        g.pw(CUDNN_POINTWISE_ADD, row, &skv, NULL, r1, CUDNN_DATA_INT32);
        g.pw(CUDNN_POINTWISE_SUB, r1, &sq, NULL, r2, CUDNN_DATA_INT32);
        r = r2;
    }
    Tensor keep = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_BOOLEAN);
    g.pw(CUDNN_POINTWISE_CMP_GE, r, &col, NULL, keep, CUDNN_DATA_BOOLEAN);
    Tensor fill = g.scalar(CUDNN_DATA_FLOAT, p->uid[T_FILL]);
    Tensor y = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_BINARY_SELECT, x, &fill, &keep, y);
    return y;
}

// the row-major block tensors as [1, heads, rows, D] (or transposed: [1, heads, D, rows])
static void rows_layout(int64_t dims[4], int64_t strides[4], int64_t heads, int64_t rows, int64_t D, int64_t ld, bool t) {
    dims[0] = 1; dims[1] = heads; strides[0] = rows * ld; strides[1] = D;
    if (!t) { dims[2] = rows; dims[3] = D; strides[2] = ld; strides[3] = 1; }
    else { dims[2] = D; dims[3] = rows; strides[2] = 1; strides[3] = ld; }
}

static void build_forward(Builder& g, SdpaPlan* p) {
    const SdpaShape& s = p->s;
    int64_t H = s.H, Hk = s.Hk, Sq = s.Sq, Skv = s.Skv, D = s.D, d[4], st[4];
    rows_layout(d, st, H, Sq, D, s.ldq, false);
    Tensor Q = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_Q]);
    Tensor O = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_O]);
    rows_layout(d, st, Hk, Skv, D, s.ldk, true);
    Tensor KT = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_K]);
    rows_layout(d, st, Hk, Skv, D, s.ldk, false);
    Tensor V = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_V]);
    const int64_t sd[4] = { 1, H, Sq, 1 }, ss[4] = { H * Sq, Sq, 1, 1 };
    Tensor Stats = g.tensor(sd, ss, CUDNN_DATA_FLOAT, false, false, p->uid[T_STATS]);
    Tensor scale = g.scalar(CUDNN_DATA_FLOAT, p->uid[T_SCALE]);

    Tensor S = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.matmul(Q, KT, S);
    Tensor S1 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_MUL, S, &scale, NULL, S1);
    Tensor Sm = s.causal ? causal_mask(g, p, S1) : S1;
    Tensor M = g.virt(1, H, Sq, 1, H * Sq, Sq, 1, 1);
    g.reduce(CUDNN_REDUCE_TENSOR_MAX, Sm, M);
    Tensor Z = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_SUB, Sm, &M, NULL, Z);
    Tensor E = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_EXP, Z, NULL, NULL, E);
    Tensor Sum = g.virt(1, H, Sq, 1, H * Sq, Sq, 1, 1);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, E, Sum);
    Tensor L = g.virt(1, H, Sq, 1, H * Sq, Sq, 1, 1);
    g.pw(CUDNN_POINTWISE_LOG, Sum, NULL, NULL, L);
    g.pw(CUDNN_POINTWISE_ADD, M, &L, NULL, Stats);
    Tensor P = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1, CUDNN_DATA_BFLOAT16);
    g.pw(CUDNN_POINTWISE_DIV, E, &Sum, NULL, P);
    g.matmul(P, V, O);
}

static void build_backward(Builder& g, SdpaPlan* p) {
    const SdpaShape& s = p->s;
    int64_t H = s.H, Hk = s.Hk, Sq = s.Sq, Skv = s.Skv, D = s.D, d[4], st[4];
    rows_layout(d, st, H, Sq, D, s.ldq, false);
    Tensor Q = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_Q]);
    Tensor O = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_O]);
    Tensor dO = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_DO]);
    Tensor dQ = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_DQ]);
    rows_layout(d, st, Hk, Skv, D, s.ldk, true);
    Tensor KT = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_K]);
    Tensor VT = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_V]);
    rows_layout(d, st, Hk, Skv, D, s.ldk, false);
    Tensor dK = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_DK]);
    Tensor dV = g.tensor(d, st, CUDNN_DATA_BFLOAT16, false, false, p->uid[T_DV]);
    const int64_t sd[4] = { 1, H, Sq, 1 }, ss[4] = { H * Sq, Sq, 1, 1 };
    Tensor Stats = g.tensor(sd, ss, CUDNN_DATA_FLOAT, false, false, p->uid[T_STATS]);
    Tensor Dsum = g.tensor(sd, ss, CUDNN_DATA_FLOAT, false, false, p->uid[T_DSUM]);
    const int64_t qd[4] = { 1, H, Sq, D }, qs[4] = { H * Sq * D, Sq * D, D, 1 };
    Tensor dQacc = g.tensor(qd, qs, CUDNN_DATA_FLOAT, false, false, p->uid[T_DQACC], CUDNN_TENSOR_REORDERING_F16x16);
    Tensor scale = g.scalar(CUDNN_DATA_FLOAT, p->uid[T_SCALE]);
    Tensor one = g.scalar(CUDNN_DATA_FLOAT, p->uid[T_ONE]);

    // Dsum = rowsum(dO * O) * 1
    Tensor dOO = g.virt(1, H, Sq, D, H * Sq * D, Sq * D, H * D, 1);
    g.pw(CUDNN_POINTWISE_MUL, dO, &O, NULL, dOO);
    Tensor red = g.virt(1, H, Sq, 1, H * Sq, Sq, 1, 1);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, dOO, red);
    g.pw(CUDNN_POINTWISE_MUL, red, &one, NULL, Dsum);
    // E = exp(scale * Q KT - Stats), masked
    Tensor S = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.matmul(Q, KT, S);
    Tensor S1 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_MUL, S, &scale, NULL, S1);
    Tensor S2 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_SUB, S1, &Stats, NULL, S2);
    Tensor Sm = s.causal ? causal_mask(g, p, S2) : S2;
    Tensor E = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_EXP, Sm, NULL, NULL, E);
    // dV = E^T dO (summed over each head group)
    Tensor ET = g.virt(1, H, Skv, Sq, H * Sq * Skv, Sq * Skv, 1, Skv, CUDNN_DATA_BFLOAT16);
    g.reshape(E, ET);
    if (H == Hk) g.matmul(ET, dO, dV);
    else {
        Tensor dVf = g.virt(1, H, Skv, D, H * Skv * D, Skv * D, D, 1, CUDNN_DATA_BFLOAT16);
        g.matmul(ET, dO, dVf);
        g.reduce(CUDNN_REDUCE_TENSOR_ADD, dVf, dV);
    }
    // dS = (dO VT - Dsum) * E * scale
    Tensor dP = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.matmul(dO, VT, dP);
    Tensor d1 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_SUB, dP, &Dsum, NULL, d1);
    Tensor d2 = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_MUL, d1, &E, NULL, d2);
    Tensor dS = g.virt(1, H, Sq, Skv, H * Sq * Skv, Sq * Skv, Skv, 1);
    g.pw(CUDNN_POINTWISE_MUL, d2, &scale, NULL, dS);
    // dK = dS^T Q (summed over each head group)
    Tensor dST = g.virt(1, H, Skv, Sq, H * Sq * Skv, Sq * Skv, 1, Skv, CUDNN_DATA_BFLOAT16);
    g.reshape(dS, dST);
    if (H == Hk) g.matmul(dST, Q, dK);
    else {
        Tensor dKf = g.virt(1, H, Skv, D, H * Skv * D, Skv * D, D, 1, CUDNN_DATA_BFLOAT16);
        g.matmul(dST, Q, dKf);
        g.reduce(CUDNN_REDUCE_TENSOR_ADD, dKf, dK);
    }
    // dQacc += dS K (the fp32 accumulator, zeroed before each execution), then dQ = bf16(dQacc)
    rows_layout(d, st, Hk, Skv, D, s.ldk, false);
    Tensor K = g.tensor(d, st, CUDNN_DATA_BFLOAT16, true);
    g.reshape(KT, K);
    g.matmul(dS, K, dQacc);
    g.pw(CUDNN_POINTWISE_IDENTITY, dQacc, NULL, NULL, dQ);
}

static void plan_error(const Builder& g, char* err, size_t errlen) {
    snprintf(err, errlen, "%s: %s%s%s", g.what, g.A->GetErrorString(g.st), g.detail[0] ? " (" : "",
             g.detail[0] ? g.detail : "");
    if (g.detail[0]) snprintf(err + strlen(err), errlen - strlen(err), ")");
}

static void destroy_all(const CudnnApi* A, std::vector<cudnnBackendDescriptor_t>& v) {
    for (size_t i = v.size(); i-- > 0;) A->DestroyDescriptor(v[i]);
    v.clear();
}

SdpaPlan* sdpa_build(const CudnnApi* api, cudnnHandle_t handle, cudnnBackendDescriptor_t devprop, const SdpaShape* s,
                     int* unsupported, char* err, size_t errlen) {
    *unsupported = 0;
    if (s->Sq < 1 || s->Skv < 1 || s->H < 1 || s->Hk < 1 || s->H % s->Hk || s->D < 1 || s->ldq < s->H * s->D ||
        s->ldk < s->Hk * s->D || (s->causal && s->Skv < s->Sq)) {
        snprintf(err, errlen, "sdpa_build: an impossible shape (Sq %d Skv %d H %d Hk %d D %d ldq %d ldk %d causal %d)",
                 s->Sq, s->Skv, s->H, s->Hk, s->D, s->ldq, s->ldk, s->causal);
        return NULL;
    }
    SdpaPlan* p = new SdpaPlan();
    p->s = *s;
    for (int i = 0; i < T_COUNT; i++) p->uid[i] = i + 1;
    p->scale = s->scale;
    p->fill = -FLT_MAX;
    p->one = 1.0f;
    p->skv = s->Skv;
    p->sq = s->Sq;
    Builder g;
    g.A = api;
    if (s->dir == SDPA_FWD) build_forward(g, p);
    else build_backward(g, p);

    cudnnBackendDescriptor_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(), g.ops.data(),
          "operation graph ops");
    if (handle) g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph handle");
    g.fin(graph, "operation graph");
    if (!g.ok()) *unsupported = g.st / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000;

    // engine configurations in the heuristics' order: the first whose plan finalizes
    cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    g.desc_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    if (!handle && devprop) g.desc_attr(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, devprop, "heuristics device");
    g.fin(heur, "engine heuristics");
    int64_t n = 0;
    if (g.ok()) {
        cudnnStatus_t st = api->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
        if (st != CUDNN_STATUS_SUCCESS) g.fail(st, "cudnnBackendGetAttribute (heuristics: how many results)");
    }
    if (g.ok() && n <= 0) {
        snprintf(err, errlen, "cuDNN %zu has no engine for this attention graph (%s, Sq %d Skv %d H %d Hk %d D %d)",
                 api->version, s->dir == SDPA_FWD ? "forward" : "backward", s->Sq, s->Skv, s->H, s->Hk, s->D);
        *unsupported = 1;
        destroy_all(api, g.all);
        delete p;
        return NULL;
    }
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; g.ok() && i < n; i++) cfgs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    if (g.ok()) {
        int64_t got = 0;
        cudnnStatus_t st = api->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                             cfgs.data());
        if (st != CUDNN_STATUS_SUCCESS) g.fail(st, "cudnnBackendGetAttribute (heuristics results)");
        if (g.ok() && got <= 0) {   // cuDNN filters the proposals by its support checks
            snprintf(err, errlen, "cuDNN %zu supports no engine for this attention graph (%s, Sq %d Skv %d H %d Hk %d D %d: "
                     "the %lld it proposed fail their support checks; CUDNN_LOGWARN_DBG=1 CUDNN_LOGDEST_DBG=stderr says why)",
                     api->version, s->dir == SDPA_FWD ? "forward" : "backward", s->Sq, s->Skv, s->H, s->Hk, s->D, (long long)n);
            *unsupported = 1;
            destroy_all(api, g.all);
            delete p;
            return NULL;
        }
        n = got < n ? got : n;
    }
    char first[700] = "";
    for (int64_t i = 0; g.ok() && i < n && !p->plan; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        cudnnStatus_t st = api->CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        if (st != CUDNN_STATUS_SUCCESS) { g.fail(st, "cudnnBackendCreateDescriptor (execution plan)"); break; }
        st = api->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (st == CUDNN_STATUS_SUCCESS && handle)
            st = api->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        if (st == CUDNN_STATUS_SUCCESS && !handle && devprop)
            st = api->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &devprop);
        if (st == CUDNN_STATUS_SUCCESS) st = api->Finalize(plan);
        if (st != CUDNN_STATUS_SUCCESS) {   // this engine cannot run it: the next one may
            if (!first[0]) {
                char msg[400] = "";
                if (api->GetLastErrorString) api->GetLastErrorString(msg, sizeof msg);
                snprintf(first, sizeof first, "%s%s%s", api->GetErrorString(st), msg[0] ? ": " : "", msg);
            }
            api->DestroyDescriptor(plan);
            if (st / 1000 == CUDNN_STATUS_EXECUTION_FAILED / 1000) break;   // the driver failed: others would too
            continue;
        }
        p->plan = plan;
        int64_t ws = 0, cnt = 0;
        st = api->GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws);
        if (st != CUDNN_STATUS_SUCCESS) g.fail(st, "cudnnBackendGetAttribute (plan workspace)");
        p->ws_cudnn = ws > 0 ? (size_t)ws : 0;
        cudnnBackendDescriptor_t eng = NULL;
        int64_t idx = -1;
        if (g.ok()) eng = g.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
        if (g.ok() && api->GetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) ==
                      CUDNN_STATUS_SUCCESS)
            api->GetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx);
        p->engine = idx;
    }
    if (!g.ok() || !p->plan) {
        if (!g.ok()) plan_error(g, err, errlen);
        else {
            snprintf(err, errlen, "none of the %lld engine configurations cuDNN proposed finalizes a plan (the first: %s)",
                     (long long)n, first);
            *unsupported = 1;
        }
        if (p->plan) api->DestroyDescriptor(p->plan);
        destroy_all(api, g.all);
        delete p;
        return NULL;
    }
    p->descs.swap(g.all);
    // workspace: the backward's fp32 intermediates first, then cuDNN's
    size_t off = 0;
    if (s->dir == SDPA_BWD) {
        p->off_dsum = off;
        off += align256((size_t)s->H * s->Sq * sizeof(float));
        p->off_dqacc = off;
        off += align256((size_t)s->H * s->Sq * s->D * sizeof(float));
    }
    p->off_cudnn = off;
    p->ws_total = off + align256(p->ws_cudnn);
    return p;
}

void sdpa_free(const CudnnApi* api, SdpaPlan* p) {
    if (!p) return;
    api->DestroyDescriptor(p->plan);
    destroy_all(api, p->descs);
    delete p;
}
size_t sdpa_workspace(const SdpaPlan* p) { return p->ws_total; }
int64_t sdpa_engine(const SdpaPlan* p) { return p->engine; }

// one execution: the variant pack of (uid, pointer) pairs and the workspace
static int run(const CudnnApi* api, cudnnHandle_t h, const SdpaPlan* p, const int64_t* uids, void* const* ptrs, int n,
               void* workspace, const char* what, char* err, size_t errlen) {
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t st = api->CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    const char* call = "cudnnBackendCreateDescriptor (variant pack)";
    void* ws = (char*)workspace + p->off_cudnn;
    if (st == CUDNN_STATUS_SUCCESS) {
        call = "cudnnBackendSetAttribute (variant pack)";
        st = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
        if (st == CUDNN_STATUS_SUCCESS) st = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
        if (st == CUDNN_STATUS_SUCCESS) st = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    }
    if (st == CUDNN_STATUS_SUCCESS) { call = "cudnnBackendFinalize (variant pack)"; st = api->Finalize(pack); }
    if (st == CUDNN_STATUS_SUCCESS) { call = "cudnnBackendExecute"; st = api->Execute(h, p->plan, pack); }
    if (st != CUDNN_STATUS_SUCCESS) {
        char msg[400] = "";
        if (api->GetLastErrorString) api->GetLastErrorString(msg, sizeof msg);
        snprintf(err, errlen, "%s (%s): %s%s%s%s", call, what, api->GetErrorString(st), msg[0] ? " (" : "", msg,
                 msg[0] ? ")" : "");
    }
    if (pack) api->DestroyDescriptor(pack);
    return st != CUDNN_STATUS_SUCCESS;
}

int sdpa_forward(const CudnnApi* api, cudnnHandle_t h, const SdpaPlan* p, const void* q, const void* k, const void* v,
                 void* o, float* stats, void* workspace, char* err, size_t errlen) {
    if (p->s.dir != SDPA_FWD) { snprintf(err, errlen, "sdpa_forward with a backward plan"); return 1; }
    int64_t uids[16];
    void* ptrs[16];
    int n = 0;
#define ADD(t, ptr) do { uids[n] = p->uid[t]; ptrs[n] = (void*)(ptr); n++; } while (0)
    ADD(T_Q, q); ADD(T_K, k); ADD(T_V, v); ADD(T_O, o); ADD(T_STATS, stats); ADD(T_SCALE, &p->scale);
    if (p->s.causal) {
        ADD(T_FILL, &p->fill);
        if (p->s.Skv != p->s.Sq) { ADD(T_SKV, &p->skv); ADD(T_SQ, &p->sq); }
    }
    return run(api, h, p, uids, ptrs, n, workspace, "attention forward", err, errlen);
}

int sdpa_backward(const CudnnApi* api, cudnnHandle_t h, const SdpaPlan* p, const void* q, const void* k, const void* v,
                  const void* o, const void* dout, const float* stats, void* dq, void* dk, void* dv, void* workspace,
                  char* err, size_t errlen) {
    if (p->s.dir != SDPA_BWD) { snprintf(err, errlen, "sdpa_backward with a forward plan"); return 1; }
    int64_t uids[16];
    void* ptrs[16];
    int n = 0;
    ADD(T_Q, q); ADD(T_K, k); ADD(T_V, v); ADD(T_O, o); ADD(T_DO, dout); ADD(T_STATS, stats);
    ADD(T_DQ, dq); ADD(T_DK, dk); ADD(T_DV, dv);
    ADD(T_DSUM, (char*)workspace + p->off_dsum); ADD(T_DQACC, (char*)workspace + p->off_dqacc);
    ADD(T_SCALE, &p->scale); ADD(T_ONE, &p->one);
    if (p->s.causal) {
        ADD(T_FILL, &p->fill);
        if (p->s.Skv != p->s.Sq) { ADD(T_SKV, &p->skv); ADD(T_SQ, &p->sq); }
    }
#undef ADD
    // cuDNN adds dQ into the accumulator: zero it, in stream order before this execution (on the handle's stream)
    cudaStream_t stream = NULL;
    cudnnStatus_t st = api->GetStream(h, &stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(err, errlen, "cudnnGetStream (attention backward): %s", api->GetErrorString(st));
        return 1;
    }
    cudaError_t e = cudaMemsetAsync((char*)workspace + p->off_dqacc, 0, (size_t)p->s.H * p->s.Sq * p->s.D * sizeof(float), stream);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaMemsetAsync (attention backward: zeroing the dQ accumulator): %s", cudaGetErrorString(e));
        return 1;
    }
    return run(api, h, p, uids, ptrs, n, workspace, "attention backward", err, errlen);
}
