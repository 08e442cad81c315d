// cudnn_graphs.cc — the attention graphs of backend/cuda/cudnn_sdpa.cu built against the REAL cuDNN, without a GPU:
// cuDNN 9.11+ plans "device-less" for a device described in JSON (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR), here an
// H200 (compute capability 9.0, 132 SMs). With the CUDA toolkit's stub libcuda on the library path (it loads, every
// driver call fails), cuDNN gets as far as it can without a GPU: it matches each graph to its fused attention
// engines, runs their support checks for the shape and compiles the kernel (NVRTC); only loading the compiled
// module (cuLibraryLoadData) needs a driver. Every graph the engine uses — forward and backward, unmasked and
// causal (top-left and bottom-right aligned), MHA / GQA / MQA, head dim 64 and 128, lengths on and off the tiles —
// must get there; a control graph (head dim 12) must be refused as unsupported, which shows that the support
// checks ran. What it cannot show: that a plan runs and computes the right numbers (the emulation's interpreter of
// the same graphs, and on a GPU the start-up self-check, do that).
//
// Built and run by tests/test_cudnn.sh where the toolkit's cudnn_graph.h, its stub libcuda and a libcudnn.so.9
// exist; otherwise that test says so in one line.
#include "backend/cuda/cudnn_sdpa.h"
#include <stdio.h>
#include <string.h>

// an H200 SXM as cuDNN's device description reads it (the fields its JSON parser asks for)
static const char H200_JSON[] =
    "{\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],\"regsPerBlock\":65536,"
    "\"multiProcessorCount\":132,\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,"
    "\"maxSharedMemoryPerBlockOptin\":232448,\"reservedSharedMemoryPerBlock\":1024,\"maxRegistersPerSM\":65536,"
    "\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,\"pciDeviceId\":0,\"isTccDriver\":0,"
    "\"supportCoopLaunch\":1,\"totalGlobalMem\":150011101184,\"smClockRateKHz\":1980000,\"memClockRateKHz\":3201000,"
    "\"l2CacheSize\":62914560,\"cudaDeviceId\":0,\"deviceVer\":900,\"driverVer\":13000,\"deviceName\":\"NVIDIA H200\"}";

int main(void) {
    CudnnApi api;
    char err[1200];
    if (cudnn_api_load(&api, err, sizeof err)) { printf("cudnn_graphs: %s\n", err); return 77; }
    printf("cuDNN %zu from %s\n", api.version, api.path);
    if (api.version < 91100) {
        printf("cudnn_graphs: cuDNN %zu plans device-less only from 9.11: skipped\n", api.version);
        return 77;
    }
    cudnnBackendDescriptor_t dev = NULL;
    cudnnStatus_t st = api.CreateDescriptor(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, &dev);
    if (st == CUDNN_STATUS_SUCCESS)
        st = api.SetAttribute(dev, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)sizeof H200_JSON,
                              H200_JSON);
    if (st == CUDNN_STATUS_SUCCESS) st = api.Finalize(dev);
    if (st != CUDNN_STATUS_SUCCESS) {
        char msg[400] = "";
        if (api.GetLastErrorString) api.GetLastErrorString(msg, sizeof msg);
        printf("not ok - the H200 device description: %s (%s)\n", api.GetErrorString(st), msg);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    // the shapes: MHA, GQA, MQA; head dim 64 and 128; lengths on and off cuDNN's tiles; Skv > Sq (bottom-right); the
    // last is the control: head dim 12 is outside cuDNN's support (a multiple of 8 is needed) and must be refused
    struct { int Sq, Skv, H, Hk, D; } shapes[] = {
        { 256, 256, 8, 2, 128 }, { 200, 328, 8, 8, 64 }, { 128, 512, 16, 1, 128 }, { 1000, 1000, 4, 2, 64 },
        { 64, 64, 4, 4, 12 },
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    int pass = 0, fail = 0;
    for (int i = 0; i < nshapes; i++)
        for (int dir = 0; dir < 2; dir++)
            for (int causal = 0; causal < 2; causal++) {
                int control = i == nshapes - 1;
                if (control && (dir || causal)) continue;
                SdpaShape s = { dir, causal, shapes[i].Sq, shapes[i].Skv, shapes[i].H, shapes[i].Hk, shapes[i].D,
                                shapes[i].H * shapes[i].D, shapes[i].Hk * shapes[i].D, 0.125f };
                int unsupported = 0;
                SdpaPlan* p = sdpa_build(&api, NULL, dev, &s, &unsupported, err, sizeof err);
                char name[160];
                snprintf(name, sizeof name, "%s %s Sq %d Skv %d H %d Hk %d D %d", dir ? "backward" : "forward",
                         causal ? (s.Sq == s.Skv ? "causal" : "causal bottom-right") : "unmasked", s.Sq, s.Skv, s.H, s.Hk, s.D);
                // accepted: a plan (a driver that loads it), or compiled and refused only by the stub driver's load
                int compiled = !p && strstr(err, "EXECUTION_FAILED_CUDA_DRIVER") && strstr(err, "cuLibraryLoadData");
                if (control) {
                    int ok = !p && unsupported && strstr(err, "supports no engine");
                    printf("%s - control: %s is refused as unsupported: %s\n", ok ? "ok" : "not ok", name, p ? "a plan" : err);
                    ok ? pass++ : fail++;
                } else if (p || compiled) {
                    if (p) printf("ok - %s: a plan, engine %lld, workspace %zu bytes\n", name, (long long)sdpa_engine(p),
                                  sdpa_workspace(p));
                    else printf("ok - %s: supported, its kernel compiled; only loading it needs a driver\n", name);
                    pass++;
                } else {
                    printf("not ok - %s: %s%s\n", name, err, unsupported ? " [unsupported]" : "");
                    fail++;
                }
                if (p) sdpa_free(&api, p);
            }
    api.DestroyDescriptor(dev);
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
}
