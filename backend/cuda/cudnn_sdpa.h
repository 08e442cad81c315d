// cudnn_sdpa.h — cuDNN's fused scaled-dot-product attention (flash attention) for one block, through cuDNN 9's
// graph (backend) C API, with libcudnn loaded at run time (dlopen): a machine without cuDNN still starts.
//
// No C++ header of cuDNN's frontend is used: the operation graph is built descriptor by descriptor, in the form
// cuDNN's fused attention engines recognise (the frontend's "composite" SDPA graphs: Q K^T, scale, an optional
// bottom-right causal mask from generated row/column indices, softmax with its statistics, P V; the backward from
// dO, O, the statistics, with dQ accumulated in fp32). Host code only (no kernels; one CUDA runtime call,
// the memset of the backward's dQ accumulator): compiled into the CUDA backend, into the emulated build, and into the
// device-less check of tests/gpu/cudnn_graphs.cc, which builds every graph against the real cuDNN for an H200 without
// a GPU.
//
// Layouts (one sequence block, batch 1, row-major as ringlm keeps them; all pointers device memory):
//   q, o, dout, dq   bf16 [Sq rows, ldq]: head h at columns h*D .. h*D+D-1
//   k, v, dk, dv     bf16 [Skv rows, ldk]: KV head g at columns g*D ..; query head h uses KV head h / (H / Hk)
//   stats            fp32 [H][Sq]: natural-log log-sum-exp of the scaled logits of each row (head-major)
// Mask: none, or causal aligned bottom-right: key j visible to query i iff j <= i + (Skv - Sq) (Skv >= Sq).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cudnn_graph.h>

#ifdef __cplusplus
extern "C" {
#endif

// the cuDNN entry points used, resolved from the loaded library
typedef struct {
    void* lib;
    size_t version;                   // cudnnGetVersion(): 91900 = 9.19.0
    char path[256];                   // what was loaded
    size_t (*GetVersion)(void);
    const char* (*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char*, size_t);
    cudnnStatus_t (*Create)(cudnnHandle_t*);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*GetStream)(cudnnHandle_t, cudaStream_t*);
    cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*);
    cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                                  int64_t, const void*);
    cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, int64_t*, void*);
    cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} CudnnApi;

// The oldest cuDNN used: 9.0 (the graph API with the fused attention patterns below).
#define SDPA_CUDNN_MIN_VERSION 90000

// Load libcudnn: the file named by $RINGLM_CUDNN_LIB, else "libcudnn.so.9" from the loader's search path. 0, or 1
// with one line in err (not found, a symbol missing, older than SDPA_CUDNN_MIN_VERSION).
int cudnn_api_load(CudnnApi* api, char* err, size_t errlen);

enum { SDPA_FWD = 0, SDPA_BWD = 1 };
typedef struct {
    int dir;                 // SDPA_FWD | SDPA_BWD
    int causal;              // 0: every key visible; 1: bottom-right causal (needs Skv >= Sq)
    int Sq, Skv, H, Hk, D;   // query rows, key rows, query heads, KV heads (divides H), head dim
    int ldq, ldk;            // row strides in elements (>= H*D, >= Hk*D)
    float scale;             // logits = scale * q.k
} SdpaShape;

typedef struct SdpaPlan SdpaPlan;

// Build the graph and an execution plan for a shape: for a GPU (handle) or, with handle NULL, device-less for the
// device that devprop describes (a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR). NULL with one line in err naming
// the call that failed, its status and cuDNN's own message; *unsupported = 1 when cuDNN has no engine for it.
SdpaPlan* sdpa_build(const CudnnApi* api, cudnnHandle_t handle, cudnnBackendDescriptor_t devprop, const SdpaShape* s,
                     int* unsupported, char* err, size_t errlen);
void sdpa_free(const CudnnApi* api, SdpaPlan* p);
// Device workspace one execution needs, in bytes (cuDNN's plus the graph's fp32 intermediates: the backward's
// rowsum(dO * O) and its fp32 dQ accumulator), and the engine cuDNN chose (its global index).
size_t sdpa_workspace(const SdpaPlan* p);
int64_t sdpa_engine(const SdpaPlan* p);

// o, stats from q, k, v (forward plan). 0, or 1 with one line in err.
int sdpa_forward(const CudnnApi* api, cudnnHandle_t h, const SdpaPlan* p, const void* q, const void* k, const void* v,
                 void* o, float* stats, void* workspace, char* err, size_t errlen);
// dq, dk, dv (overwritten) from q, k, v, o, dout and the stats (backward plan). cuDNN uses o only through
// D = rowsum(dout * o). The workspace's fp32 dQ accumulator is zeroed first, on the handle's stream (cuDNN adds into
// it). 0, or 1 with one line in err.
int sdpa_backward(const CudnnApi* api, cudnnHandle_t h, const SdpaPlan* p, const void* q, const void* k, const void* v,
                  const void* o, const void* dout, const float* stats, void* dq, void* dk, void* dv, void* workspace,
                  char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
