// comm_mpi.h — the MPI side of a Group, for the code that must speak MPI itself: the grid (which makes the
// communicators) and MPI-IO (parallel HDF5). Everything else uses comm/comm.h.
#pragma once
#include <mpi.h>
#include "comm/comm.h"

struct Group { MPI_Comm comm; int rank, size; void* data; };   // data: the data transport's state

Group* group_from_mpi(MPI_Comm comm);   // wraps (and owns) comm
MPI_Comm group_mpi(const Group* g);

// Largest element count of one MPI call (MPI counts are int). RINGLM_COMM_MAX_COUNT lowers it so that the
// tests exercise the split paths on small models.
size_t mpi_max_count(void);
// in-place all-reduce of n elements of `size` bytes, split into calls of at most mpi_max_count() elements
void mpi_allreduce(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op);

// Implemented by the data transport (data_mpi.c, or a device transport): prepare group g for data
// collectives (a device transport creates its communicator). Called by the grid for every group it makes.
int comm_data_attach(Group* g, char* err, size_t errlen);
