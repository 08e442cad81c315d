// emu_cublas.cc — cuBLAS for the host emulation: cublasGemmEx as a reference GEMM on device memory.
// Column-major, as cuBLAS: C = alpha op(A) op(B) + beta C with op(A) [m, k], op(B) [k, n], leading dimensions
// lda, ldb, ldc checked as cuBLAS checks them and every matrix checked to lie inside its allocation. The compute
// type sets the input rounding of the tensor cores: CUBLAS_COMPUTE_32F_FAST_16BF rounds A and B to bf16 (to
// nearest even), CUBLAS_COMPUTE_32F_FAST_TF32 to tf32 (10-bit mantissa, to nearest, ties away from zero, as
// cvt.rna.tf32.f32), CUBLAS_COMPUTE_32F keeps them; the products of the rounded inputs are summed in fp32 in an
// order of the emulation's own, not the CPU backend's (OpenBLAS's): k in slices of EMU_GEMM_KSLICE = 16 (a tensor-core
// instruction's k), each slice's products summed in k order from zero, each slice's sum then added to the element's
// running fp32 accumulator, alpha applied last. So an emulated GEMM differs from the CPU's by the rounding of another
// summation order (~1e-7 relative per product, as real cuBLAS does by its tiling and split-K), and every CPU-vs-CUDA
// tolerance of the tests is exercised with such rounding; for k <= 16 the order is plain k order. beta = 0 means C is
// not read (NaN in C does not propagate).
// Types: A and B both fp32 (CUDA_R_32F, any of the three compute types) or both bf16 (CUDA_R_16BF, CUBLAS_COMPUTE_32F:
// exact in fp32); C fp32 or bf16 (the fp32 result rounded to nearest even), as cuBLAS supports them.
// Runs in stream order on the handle's stream, and counts for the race checks like any operation.
#include "emu_internal.h"
#include "cublas_v2.h"
#include <cstdlib>
#include <cstring>
#include <vector>

struct EmuBlas {
    cudaStream_t stream;
    void* ws;
    size_t ws_bytes;
    bool dead;
};

namespace {
float round_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;   // inf, NaN
    u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}
float bf16_to_f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t f_to_bf16(float x) {   // to nearest even; NaN stays NaN
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
// op(X) of a column-major matrix X (fp32 or bf16, leading dimension ld) as an R x K column-major matrix
// (out[c * R + r] = op(X)[r][c]), rounded as the compute type rounds the inputs
void pack(std::vector<float>& out, const void* src, bool bf, bool trans, int R, int K, int ld, int compute) {
    out.resize((size_t)R * K);
    for (int c = 0; c < K; c++)
        for (int r = 0; r < R; r++) {
            size_t at = trans ? (size_t)r * ld + c : (size_t)c * ld + r;
            float v = bf ? bf16_to_f(((const uint16_t*)src)[at]) : ((const float*)src)[at];
            out[(size_t)c * R + r] = compute == CUBLAS_COMPUTE_32F_FAST_16BF ? emu::round_bf16(v)
                                   : compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? round_tf32(v) : v;
        }
}

// C[:, j] (column-major, ldc) = alpha * sum_k A[:, k] B[k, j] + beta C[:, j] with A packed m x k, B packed k x n (both
// column-major): the sums in slices of EMU_GEMM_KSLICE (see the header), vectorised over the rows of a column
const int EMU_GEMM_KSLICE = 16;
void gemm_sliced(float* C, int ldc, const float* A, const float* B, int m, int n, int k, float alpha, float beta) {
    static std::vector<float> acc, part;
    acc.resize((size_t)m);
    part.resize((size_t)m);
    for (int j = 0; j < n; j++) {
        const float* b = B + (size_t)j * k;
        float* a_ = acc.data();
        float* p_ = part.data();
        for (int i = 0; i < m; i++) a_[i] = 0.0f;
        for (int k0 = 0; k0 < k; k0 += EMU_GEMM_KSLICE) {
            int k1 = k0 + EMU_GEMM_KSLICE < k ? k0 + EMU_GEMM_KSLICE : k;
            for (int i = 0; i < m; i++) p_[i] = 0.0f;
            for (int kk = k0; kk < k1; kk++) {
                const float* ak = A + (size_t)kk * m;
                float bk = b[kk];
                for (int i = 0; i < m; i++) p_[i] += ak[i] * bk;
            }
            for (int i = 0; i < m; i++) a_[i] += p_[i];
        }
        float* c = C + (size_t)j * ldc;
        if (beta == 0.0f) for (int i = 0; i < m; i++) c[i] = alpha * a_[i];
        else for (int i = 0; i < m; i++) c[i] = alpha * a_[i] + beta * c[i];
    }
}
}   // namespace

extern "C" {

const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

cublasStatus_t cublasCreate(cublasHandle_t* h) {
    emu::ensure_init();
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    EmuBlas* b = new EmuBlas();
    b->stream = NULL;
    b->ws = NULL;
    b->ws_bytes = 0;
    b->dead = false;
    *h = b;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h || h->dead) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->dead = true;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h || h->dead) return CUBLAS_STATUS_NOT_INITIALIZED;
    emu::stream_of(s);
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes) {
    if (!h || h->dead) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !ws) return CUBLAS_STATUS_INVALID_VALUE;
    if (bytes) emu::need_device("cublasSetWorkspace", "the workspace", ws, bytes);
    if ((uintptr_t)ws % 256) return CUBLAS_STATUS_INVALID_VALUE;   // cuBLAS needs 256-byte alignment
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B, cudaDataType_t bt,
                            int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h || h->dead) return CUBLAS_STATUS_NOT_INITIALIZED;
    bool abf = at == CUDA_R_16BF, cbf = ct == CUDA_R_16BF;
    if (at != bt || (at != CUDA_R_32F && at != CUDA_R_16BF) || (ct != CUDA_R_32F && ct != CUDA_R_16BF) ||
        (abf && compute != CUBLAS_COMPUTE_32F) || (!abf && cbf))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    size_t ea = abf ? 2 : 4, ec = cbf ? 2 : 4;
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) return CUBLAS_STATUS_INVALID_VALUE;
    int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;   // A as stored
    int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float al, be;
    memcpy(&al, alpha, 4);   // the pointer mode is host (cuBLAS's default)
    memcpy(&be, beta, 4);
    const char* op = "cublasGemmEx";
    size_t cbytes = ((size_t)(n - 1) * ldc + m) * ec;
    emu::need_device(op, "C", C, cbytes);
    bool use_ab = k > 0 && al != 0.0f;
    if (use_ab) {
        emu::need_device(op, "A", A, ((size_t)(ac - 1) * lda + ar) * ea);
        emu::need_device(op, "B", B, ((size_t)(bc - 1) * ldb + br) * ea);
    }
    emu::Stream* s = emu::stream_of(h->stream);
    uint64_t t = emu::begin_op(s, op);
    if (use_ab) {
        emu::access(s, t, op, A, ((size_t)(ac - 1) * lda + ar) * ea, false);
        emu::access(s, t, op, B, ((size_t)(bc - 1) * ldb + br) * ea, false);
    }
    emu::access(s, t, op, C, cbytes, true);
    if (emu::dry()) return CUBLAS_STATUS_SUCCESS;
    emu::DeviceAccess da;
    // C in fp32 (a bf16 C through a packed fp32 copy, rounded to bf16 at the end)
    static std::vector<float> pc;
    float* c = (float*)C;
    int cld = ldc;
    if (cbf) {
        pc.assign((size_t)m * n, 0.0f);
        if (be != 0.0f)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) pc[(size_t)j * m + i] = bf16_to_f(((const uint16_t*)C)[(size_t)j * ldc + i]);
        c = pc.data();
        cld = m > 1 ? m : 1;
    } else if (be == 0.0f)
        for (int j = 0; j < n; j++) memset(c + (size_t)j * ldc, 0, (size_t)m * 4);
    if (!use_ab) {
        if (be != 0.0f && be != 1.0f)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) c[(size_t)j * cld + i] *= be;
    } else {
        static std::vector<float> pa, pb;
        pack(pa, A, abf, ta != CUBLAS_OP_N, m, k, lda, compute);
        pack(pb, B, abf, tb != CUBLAS_OP_N, k, n, ldb, compute);
        gemm_sliced(c, cld, pa.data(), pb.data(), m, n, k, al, be);
    }
    if (cbf)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) ((uint16_t*)C)[(size_t)j * ldc + i] = f_to_bf16(pc[(size_t)j * m + i]);
    return CUBLAS_STATUS_SUCCESS;
}

}   // extern "C"
