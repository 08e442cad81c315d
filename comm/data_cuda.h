// data_cuda.h — the seam between the CUDA backend (backend/cuda/) and its device transport (comm/data_cuda.c).
//
// The transport needs the backend's device and compute stream before be_init may have run: the grid
// attaches its groups (comm_data_attach) before the program calls be_init, and a NCCL communicator needs
// the device. So the backend starts on the first of the two calls, on the same device either way
// (node-local rank modulo the number of devices).
#pragma once
#include <stddef.h>

// Start the CUDA backend on device local_rank % device count, unless it has started already (then 0 at
// once, whatever local_rank is). 0, or 1 with one line in err (no device, driver too old, wrong GPU, ...).
int cuda_backend_start(int local_rank, char* err, size_t errlen);
int cuda_backend_started(void);
// the compute stream (a cudaStream_t) every backend kernel runs on; valid once started
void* cuda_backend_stream(void);
// the UUID (16 bytes) of the backend's device, to find ranks that share one; valid once started
void cuda_backend_device_uuid(unsigned char uuid[16]);
// The backend's profile by kernel class (RINGLM_CUDA_PROFILE): the transport brackets its calls with begin = 1 and
// begin = 0 (class "communication waits"); nothing happens unless profiling is on.
void cuda_backend_prof_comm(int begin);
// The step anatomy (RINGLM_CUDA_ANATOMY, backend/cuda/anatomy.cu): the transport reports its host synchronisations,
// host<->device copies and collectives (bytes of the buffer) to it; nothing happens unless it counts a step.
void cuda_backend_note_sync(const char* why);
void cuda_backend_note_xfer(int to_device, double bytes);
void cuda_backend_note_collective(const char* name, double bytes);
