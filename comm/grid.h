// grid.h — the process grid: world = dp x cp x tp, and every group derived from it.
//
// Rank order (Megatron): rank = tp_rank + tp * (cp_rank + cp * dp_rank) — tensor-parallel ranks are
// consecutive (they share a node), then the ring (context-parallel) index, then the data-parallel index.
// TP groups: same cp and dp index. CP groups: same tp and dp index (without an all-to-all, the ring); with an
// all-to-all degree U, all-to-all groups of U consecutive cp ranks and rings of the cp / U ranks at the same index
// of their all-to-all groups. DP groups: same tp and cp index.
// The dp x cp group (same tp index) reduces the gradients of weights replicated over dp and cp.
#pragma once
#include "comm/comm.h"

typedef struct {
    int world, rank;
    int tp, cp, dp;
    int tp_rank, cp_rank, dp_rank;
    int a2a;                   // all-to-all degree inside cp (1: none)
    int local_rank;            // index among the ranks on this node (a GPU backend's device)
    Group *world_g, *tp_g, *cp_g, *dp_g, *dpcp_g;
    Group *a2a_g;              // a2a > 1: the a2a consecutive cp ranks of this rank's all-to-all group, else NULL
    Group *ring_g;             // the ring: cp_g without all-to-all; the ranks at this index of their all-to-all group
                               // (cp / a2a of them) with it; NULL when that is one rank
} Grid;

// A program that cannot stop half-way (build/eval, build/sample): SIGTERM or SIGUSR1 — a preemption, what
// tools/preemptible passes on — ends it at once with exit status 1 and one line on stderr (launch rank 0) naming
// `who`. Call first thing in main, before grid_mpi_init, so that a signal during start-up is handled too.
void grid_stop_on_signals(const char* who);
// MPI_Init (MPI_THREAD_MULTIPLE when the library has it: the watchdog's phase thread) — call first thing in main.
// A start-up that does not finish within RINGLM_INIT_TIMEOUT_S seconds (default 600; fractions kept; 0: no limit) —
// a rank that never arrived — ends the job with one line; a value that is not a number in [0, 1e6] too. Tasks that
// srun started (not mpirun) must form one MPI world of the step's task count: singletons (no PMI) end with one line.
void grid_mpi_init(int* argc, char*** argv);
// A program's --timeout_s VALUE (the watchdog, as build/train's key timeout_s: seconds >= 0, 0 off, at most 1e9):
// 0 with *out set, or 1 with one line in err naming `who` (the program).
int grid_parse_timeout(const char* who, const char* v, double* out, char* err, size_t errlen);
// Every rank of the job (valid after grid_mpi_init).
const Group* group_world(void);
// Build the grid for the given tp and cp (dp = world / (tp * cp)), the cp ranks split into all-to-all groups of
// a2a consecutive ranks (a2a = 1: none) and rings across them. Returns 0, or 1 with err filled (one line) when the
// world size does not factor; the error is the same on every rank.
int grid_build(Grid* g, int tp, int cp, int a2a, char* err, size_t errlen);
// Print the grid (rank 0 only).
void grid_print(const Grid* g);
// Collective error check: if `failed` on any rank, the lowest failing rank prints msg on stderr (one line),
// and every rank finalises MPI and exits with status 1. Otherwise returns.
void grid_check(const Group* g, int failed, const char* msg);
// Collective: 1 on every rank when `failed` on any, with msg[n] replaced everywhere by the lowest failing
// rank's message (library code returns errors this way; the program then calls grid_check or exits).
int grid_agree(const Group* g, int failed, char* msg, size_t n);
// Finalise MPI and exit with `status` on this rank (collective: every rank calls it). Functions registered
// with grid_on_exit run first, before the ranks wait for each other: once one rank exits, mpirun may kill
// the others, so what must happen before any exit (removing a lock file) goes there.
void grid_exit(int status);
void grid_on_exit(void (*fn)(void));
