// emu_internal.h — what the emulation's runtime (emu_runtime.cc) offers its cuBLAS (emu_cublas.cc) and NCCL
// (emu_nccl.cc) parts: errors, device memory, stream order with its race checks, deferred operations.
#pragma once
#include "cuda_runtime.h"
#include <cstddef>
#include <cstdint>

namespace emu {

// one line "cuda emulation: <message>" on stderr, then the process ends (the whole job under MPI)
[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void ensure_init(void);
bool dry(void);   // RINGLM_EMU_DRY: operations are not executed
int device_index(void);
const cudaDeviceProp& props(void);

// ---- memory ----
enum { DEVICE = 1, PINNED = 2 };
struct Alloc {
    uintptr_t base;      // what the caller got
    size_t size;         // bytes asked for
    uintptr_t lo, hi;    // the pages holding them (a device allocation ends at hi, then a guard page)
    int kind;            // DEVICE or PINNED
    bool live;
    unsigned long serial;
    const char* how;     // "cudaMalloc", "cudaMallocAsync", "cudaMallocHost"
    int copy_stream;     // pinned: the stream of the last asynchronous copy from or to it (-1: none)
    uint64_t copy_time;  // and its time on that stream's clock (the host has waited for it once g_host reaches it)
};
// the allocation whose pages (or trailing guard page) hold p, live or freed; NULL if none
Alloc* find_alloc(const void* p);
// [p, p + bytes) inside one live device allocation, else one line naming op and what, and the end
Alloc* need_device(const char* op, const char* what, const void* p, size_t bytes);
bool in_device_space(const void* p);   // the address range reserved for device memory

// Device memory is readable and writable only while an instance of this lives (kernels, copies, cuBLAS, NCCL);
// at other times any access ends the process with one line naming the host code that made it.
struct DeviceAccess {
    DeviceAccess();
    ~DeviceAccess();
};

// ---- streams: every operation runs when it is enqueued, in stream order ----
struct Stream;
Stream* stream_of(cudaStream_t s);      // NULL = the legacy default stream; a destroyed stream ends the process
int stream_id(const Stream* s);
// Start an operation `op` on stream s: completes s's deferred operations (stream order) and returns the
// operation's time on s's clock.
uint64_t begin_op(Stream* s, const char* op);
// Record that the operation at time t on s reads (write = false) or writes [lo, hi) of device memory; ends the
// process with one line when an operation of another stream that no event orders before this one touched the
// same bytes (a write against anything, or anything against a write). point: the access is known only by one
// address (a kernel's pointer argument): it matches a range that contains it.
void access(Stream* s, uint64_t t, const char* op, const void* lo, size_t bytes, bool write, bool point = false);

// NCCL's progress rule: NCCL gives no progress guarantee to operations of two communicators that can run at the same
// time (a real GPU may run one kernel of them and the other never, and each rank may pick differently: a deadlock).
// Record that NCCL operation `op` of communicator `comm` (its `group`: the operations of one ncclGroupEnd are one
// launch) runs at time t on s; ends the process with one line when an operation of another communicator on another
// stream is not ordered against it by an event (it may still be running, or not yet have started).
void nccl_order(Stream* s, uint64_t t, const char* op, const void* comm, int comm_size, unsigned long group);

// An operation that completes later (NCCL): progress without blocking, blocking wait, and the effect on device
// memory applied when it completes (inside DeviceAccess). Owned by the stream once deferred.
struct Deferred {
    virtual ~Deferred() {}
    virtual bool test() = 0;     // true once it can complete without blocking
    virtual void wait() = 0;     // block until it can complete
    virtual void finish() = 0;   // apply its results (device memory is accessible)
    const char* op = "";
    unsigned long seq = 0;
};
void defer(Stream* s, Deferred* d);

// seconds on a monotonic clock
double now(void);

// x rounded to bf16, to nearest even (NaN stays NaN): the tensor cores' input rounding (cuBLAS, cuDNN)
inline float round_bf16(float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
    __builtin_memcpy(&x, &u, 4);
    return x;
}
}   // namespace emu
