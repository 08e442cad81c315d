// comm.h — the communication layer: collectives and point-to-point between ranks of a group.
//
// Buffers are backend memory. comm_mpi.c implements this with MPI on host memory (the CPU backend);
// a NCCL implementation for device memory will supply the same functions. Groups come from the grid
// (comm/grid.h), which owns every communicator.
#pragma once
#include <stddef.h>
#include <mpi.h>

typedef struct {   // a group of ranks; group_world() is every rank
    MPI_Comm comm;
    int rank, size;
} Group;

typedef struct { MPI_Request req[8]; int n; } CommReqs;   // outstanding non-blocking operations

Group group_world(void);

void comm_allreduce_sum(const Group* g, float* buf, size_t n);    // in place, fp32
void comm_allreduce_max(const Group* g, float* buf, size_t n);    // in place, fp32
double comm_sum_double(const Group* g, double x);                 // host scalar
double comm_max_double(const Group* g, double x);                 // host scalar
long long comm_sum_ll(const Group* g, long long x);
void comm_broadcast(const Group* g, void* buf, size_t bytes, int root);
void comm_barrier(const Group* g);
// in place: rank i's part is buf[displs[i] .. displs[i]+counts[i]) (fp32); afterwards every rank has all parts
void comm_allgatherv(const Group* g, float* buf, const int* counts, const int* displs);
// every rank's `n` ints, concatenated in rank order into recv[size * n] on every rank (host memory)
void comm_allgather_int(const Group* g, const int* send, int* recv, size_t n);
// gather `bytes` from every rank into root's buf[size * bytes] in rank order
void comm_gather(const Group* g, const void* send, void* recv, size_t bytes, int root);

// Non-blocking point-to-point (fp32 elements); requests collect in r (up to 8).
void comm_isend(const Group* g, const float* buf, size_t n, int dst, int tag, CommReqs* r);
void comm_irecv(const Group* g, float* buf, size_t n, int src, int tag, CommReqs* r);
int  comm_test(CommReqs* r);     // 1 when all of r completed (drives progress); never blocks
void comm_wait(CommReqs* r);     // block until all of r completed; r is empty afterwards
