// comm.h — the communication layer: what ranks of a group exchange, split by what it carries.
//
// Control collectives move small host values (scalars, flags, config bytes, positions): always MPI.
// Data collectives and the ring hop move backend buffers (gradients, activations, K/V blocks): MPI on
// host memory in comm_mpi.c; a device transport (NCCL) supplies the same calls for device memory.
// Groups and requests are opaque; the grid (comm/grid.h) makes every group. Sizes are 64-bit: a message
// longer than the transport's count limit is split.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct Group Group;       // a group of ranks
typedef struct CommReq CommReq;   // transfers in flight (a few at a time; more is a programming error)

int group_rank(const Group* g);
int group_size(const Group* g);

// The transport of the data collectives: "auto" (the backend's own), "mpi" (host memory; a device backend
// stages through pinned host memory) or "nccl" (device memory). Call before the grid is built. 0, or 1
// with one line in err when this build has no such transport.
int comm_set_transport(const char* name, char* err, size_t errlen);
// A device transport prints one line naming the transport it chose (world rank 0): to stdout by default, to
// stderr after comm_set_note_stderr(1) (build/sample, whose stdout is the generated text).
void comm_set_note_stderr(int on);

// The watchdog: a blocking call of this layer (every collective below, comm_wait) that has not finished
// after `seconds` aborts the job with one line naming the operation, the group and the ranks that did not
// arrive (asked over a side channel: no answer = stopped, hung or dead). 0 disables it; the default is 600.
// Waiting ranks poll, and after the first millisecond sleep between polls: a stalled peer costs no CPU.
void comm_set_timeout(double seconds);
// A phase of the job in which ranks block outside this layer too: HDF5's collective I/O (it waits inside MPI-IO)
// and one rank's file work while the others wait (a checkpoint's save, verification and load). Between begin and
// end a thread of the watchdog answers the side channel for this rank while it is not in a wait of this layer, and
// ends the job with one line (naming the phase and the ranks that do not answer) when this rank has been out of
// the layer's waits for `seconds` of comm_set_timeout. `name` ("saving ckpt_00000100.h5") ends every watchdog line
// of the phase (" while NAME"). Needs MPI_THREAD_MULTIPLE; without it the phase only names the layer's waits.
void comm_phase_begin(const char* name);
void comm_phase_end(void);

// ---- control collectives: host memory ----
void ctl_sum_f64(const Group* g, double* x, size_t n);     // in place, element-wise over the group
void ctl_max_f64(const Group* g, double* x, size_t n);
void ctl_sum_u64(const Group* g, uint64_t* x, size_t n);   // mod 2^64 (checksums)
double ctl_sum(const Group* g, double x);                  // one value
double ctl_max(const Group* g, double x);
int ctl_any(const Group* g, int flag);                     // 1 when flag is set on any rank
void ctl_bcast(const Group* g, void* buf, size_t bytes, int root);
void ctl_barrier(const Group* g);
// gather `bytes` from every rank into root's recv[size * bytes], in rank order
void ctl_gather(const Group* g, const void* send, void* recv, size_t bytes, int root);
// every rank's `bytes`, in rank order, into recv[size * bytes] on every rank
void ctl_allgather(const Group* g, const void* send, void* recv, size_t bytes);

// ---- data collectives: backend memory, fp32 ----
void comm_allreduce_sum(const Group* g, float* buf, size_t n);   // in place
void comm_allreduce_sum_f64(const Group* g, double* buf, size_t n);   // a few doubles (sums of squares), in place
void comm_allreduce_max(const Group* g, float* buf, size_t n);
void comm_broadcast(const Group* g, float* buf, size_t n, int root);
// buf [size * n], rank i's part at i * n. allgather: each rank's own part in, every part out.
// reduce_scatter_sum: every part in; afterwards the own part holds the sum over the group of that part
// (the other parts are left undefined).
void comm_allgather(const Group* g, float* buf, size_t n);
void comm_reduce_scatter_sum(const Group* g, float* buf, size_t n);
// An all-gather started now and completed by comm_wait(r) (or a comm_test that returns 1): a device transport runs
// it beside the compute queue (NCCL: on the communication stream, after what the compute queue holds now; the
// compute queue waits for it at comm_wait); the other transports complete it before returning.
void comm_allgather_start(const Group* g, float* buf, size_t n, CommReq* r);
// all-to-all: send [size * n], its block j (n floats at j * n) goes to rank j; recv [size * n], its block i is what
// rank i sent to this rank (the own block copied). send and recv do not overlap.
void comm_alltoall(const Group* g, const float* send, float* recv, size_t n);

// ---- traffic: what this rank has sent through the data collectives and ring hops since the start ----
// Counted as the collective algorithms of the device transport (NCCL's rings) move data, whatever this build's
// transport does underneath: a ring hop of n floats sends n (one message); an all-to-all of blocks of n floats
// (P - 1) n in P - 1 messages; an all-gather or reduce-scatter of parts of n floats (P - 1) n in P - 1; an
// all-reduce of n floats 2 (P - 1) n / P in 2 (P - 1); a broadcast n from the root (P - 1 messages), 0 elsewhere.
enum { TRAFFIC_HOP, TRAFFIC_A2A, TRAFFIC_ALLREDUCE, TRAFFIC_PARTS, TRAFFIC_BCAST, TRAFFIC_KINDS };
typedef struct { double bytes[TRAFFIC_KINDS], messages[TRAFFIC_KINDS]; } CommTraffic;
CommTraffic comm_traffic(void);
// (the transports) count one call of `kind` on g with n floats (per part / block for all-to-all, all-gather and
// reduce-scatter); root: a broadcast's
void comm_traffic_count(int kind, const Group* g, size_t n, int root);

// ---- the ring hop: send n floats to the next rank of g and receive n floats from the previous one ----
// Both directions start together (a device transport must group them); complete with comm_test (never
// blocks, drives progress) or comm_wait. Hops started on one request between waits complete in order.
// send = NULL: nothing is sent (the next rank passes recv = NULL for this hop); recv = NULL: nothing is received
// (the previous rank passes send = NULL). Only what is sent is counted.
CommReq* comm_req_create(void);
void comm_req_free(CommReq* r);
void comm_hop(const Group* g, const float* send, float* recv, size_t n, CommReq* r);
// The same with ns floats sent and nr received (the previous rank sends nr; a side of 0 floats or NULL is left out).
void comm_hop_sized(const Group* g, const float* send, size_t ns, float* recv, size_t nr, CommReq* r);
int  comm_test(CommReq* r);   // 1 when everything on r completed
void comm_wait(CommReq* r);   // blocks until everything on r completed; r is empty afterwards
