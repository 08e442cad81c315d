// rundir.h — what keeps runs apart in an out_dir (serial: the trainer's rank 0 calls these):
//   - an exclusive lock, OUT_DIR/train.lock, held for the whole run (flock, so that the kernel releases it when
//     the process dies however it dies; the file names the holder's host, pid and start time and is removed
//     at a normal exit — one left behind is a dead run's, and the next run takes it over);
//   - the run id, OUT_DIR/run_id (also stored in every checkpoint), which tells a resume into another run's
//     out_dir from a resume of the same run;
//   - when a run resumes from an earlier step than the out_dir reached: the metrics and checkpoints past it
//     are set aside (never deleted), so that metrics.jsonl has each step once and keep_last and `latest`
//     see only this run's checkpoints.
// Errors follow the library convention: 0, or 1 with one line in err.
#pragma once
#include <stddef.h>

// Take OUT_DIR/train.lock. 1 + err when another live process holds it (naming its host, pid and start) or
// the file cannot be created; 0 when taken — then note[0] != 0 when a dead run's lock was taken over, or
// when the file system cannot lock at all (the run goes on unprotected). Released at exit (atexit), or
// earlier by rundir_unlock.
int rundir_lock(const char* dir, char* note, size_t notelen, char* err, size_t errlen);
// Remove the lock file and release the lock (when this process holds it).
void rundir_unlock(void);

// A new run id: UTC date and time and 8 random hex digits, e.g. 20261201-195900-3f9a0c1d.
void rundir_new_id(char* id, size_t n);
// OUT_DIR/run_id into id: 1 when there is one, 0 when not (id = "").
int rundir_read_id(const char* dir, char* id, size_t n);
// Write OUT_DIR/run_id (via a temporary file and rename). 0, or 1 + err.
int rundir_write_id(const char* dir, const char* id, char* err, size_t errlen);
// 1 when file `path` lies in directory `dir` (the same directory after resolving links and "..").
int rundir_holds(const char* dir, const char* path);

// What lies past `step` in the out_dir: metrics.jsonl records with a larger step (count, largest step) and
// checkpoints ckpt_N.h5 with N > step (count, largest N).
typedef struct { long long metrics, metrics_max, ckpts, ckpts_max; } RunLater;
void rundir_later(const char* dir, long long step, RunLater* l);
// Set aside what rundir_later found: the metrics.jsonl records past `step` move (in order) to the end of
// metrics.superseded.jsonl; the later checkpoints are renamed ckpt_N.h5.superseded (.superseded.2, ... when
// that name is taken); and when `latest` named one of them it is pointed at `resumed` (a checkpoint file in
// dir: its name), or renamed latest.superseded when resumed is elsewhere. 0, or 1 + err.
int rundir_supersede(const char* dir, long long step, const char* resumed, char* err, size_t errlen);

// What a fresh run finds in OUT_DIR from an earlier run: checkpoints named as the trainer names them
// (ckpt_NNNNNNNN.h5: count, smallest and largest N), `latest` (and the name it holds), metrics.jsonl (whether it
// exists, its size, its records).
typedef struct { long long ckpts, ckpt_min, ckpt_max, metrics, metrics_bytes; int has_metrics, latest; char latest_name[256]; } RunFound;
void rundir_found(const char* dir, RunFound* f);
// A fresh run with --force: set aside (never delete) what rundir_found found: every line of metrics.jsonl moves to
// the end of metrics.superseded.jsonl, the checkpoints are renamed ckpt_N.h5.superseded and `latest`
// latest.superseded (.superseded.2, ... when taken). 0, or 1 + err.
int rundir_set_aside(const char* dir, char* err, size_t errlen);
