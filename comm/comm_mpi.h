// comm_mpi.h — the MPI side of a Group, for the code that must speak MPI itself: the grid (which makes the
// communicators) and MPI-IO (parallel HDF5). Everything else uses comm/comm.h.
#pragma once
#include <mpi.h>
#include "comm/comm.h"

struct Group { MPI_Comm comm; int rank, size; };

Group* group_from_mpi(MPI_Comm comm);   // wraps (and owns) comm
MPI_Comm group_mpi(const Group* g);
