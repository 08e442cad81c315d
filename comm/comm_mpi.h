// comm_mpi.h — the MPI side of a Group, for the code that must speak MPI itself: the grid (which makes the
// communicators) and MPI-IO (parallel HDF5). Everything else uses comm/comm.h.
#pragma once
#include <mpi.h>
#include "comm/comm.h"

// data: the data transport's state. id: the same on every member (the watchdog's side channel names groups
// by it); name: what messages call the group ("world", "tp", "ring", ...); seq: collectives started on it
struct Group { MPI_Comm comm; int rank, size; void* data; int id; char name[8]; long long seq; };

Group* group_from_mpi(MPI_Comm comm);   // wraps (and owns) comm; collective over comm
void group_set_name(Group* g, const char* name);
MPI_Comm group_mpi(const Group* g);

// Largest element count of one MPI call (MPI counts are int). RINGLM_COMM_MAX_COUNT lowers it so that the
// tests exercise the split paths on small models.
size_t mpi_max_count(void);
// in-place all-reduce of n elements of `size` bytes, split into calls of at most mpi_max_count() elements
void mpi_allreduce(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op);
// the same, named `what` in the watchdog's message
void mpi_allreduce_named(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op, const char* what);

// all-to-all of host memory (comm_alltoall's semantics), named `what` in the watchdog's message
void mpi_alltoall(const Group* g, const float* send, float* recv, size_t n, const char* what);

// ---- the watchdog (see comm_set_timeout) ----
// The side channel (a duplicate of MPI_COMM_WORLD): collective over the world, once, right after MPI_Init, with
// the thread level MPI provided (MPI_THREAD_MULTIPLE: the phase thread of comm_phase_begin starts).
void comm_watch_init(int thread_level);
// Before MPI_Finalize: the phase thread stops using MPI (also when the program exits inside a phase).
void comm_watch_shutdown(void);
// Count one collective started on g (call before starting it: the side channel reports how far each rank got).
void comm_watch_started(const Group* g);
// Complete the n requests of operation `what` on g, polling (then sleeping between polls), and abort the job
// with one line when they have not completed within the timeout. peer (NULL for a collective): the world rank
// at the other end of each request (point-to-point transfers), named when its request is the one pending.
void comm_watch_wait(const Group* g, int n, MPI_Request* rq, const char* what, const int* peer);

// Implemented by the data transport (data_mpi.c, or a device transport): prepare group g for data
// collectives (a device transport creates its communicator). Called by the grid for every group it makes.
int comm_data_attach(Group* g, char* err, size_t errlen);
