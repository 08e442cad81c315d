// tbevents.h — TensorBoard event files written during training (config key tensorboard_dir): one scalar per numeric
// key of each metrics.jsonl record, under the tags of tools/metrics_to_tensorboard.py (GROUP/KEY: loss/loss,
// optim/lr, speed/tokens_per_s, ring/cp_*, traffic/sent_*, verify/verify_*, other/KEY).
//
// File format (TFRecord framing; event.proto and summary.proto encoded by hand): records of
//   uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)   (little-endian;
//   masked = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2^32; crc32c: CRC-32 with the Castagnoli polynomial)
// each data an Event message: wall_time (field 1, double), step (2, int64), file_version (3, string,
// "brain.Event:2" in the first record), summary (5: Summary { repeated Value value = 1 { tag = 1 (string),
// simple_value = 2 (float) } }), session_log (7: SessionLog { status = 1 (enum; START = 1) }).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE* f;
    char path[4096];
} TbWriter;

// the masked CRC-32C of n bytes (the TFRecord framing's checksum)
uint32_t tb_masked_crc(const void* data, size_t n);
// the tag of a metrics key: GROUP/KEY as tools/metrics_to_tensorboard.py names it
void tb_tag(const char* key, char* out, size_t n);
// creates dir (mkdir -p) and a new event file in it, events.out.tfevents.<unix seconds>.<microseconds>.<host>.<pid>
// .<run id>.ringlm-train, whose first record carries the file version and the second a SessionLog START (field 7: status = 1)
// at first_step, the step of the run's first record: TensorBoard then drops what earlier files hold from that step
// on (a resumed run supersedes them). 0, or 1 with one line in err.
int tb_open(TbWriter* w, const char* dir, const char* run_id, double wall_time, long long first_step, char* err, size_t errlen);
// the event files in dir that build/train wrote for another run than run_id (or, before run ids were in the names,
// for an unknown one): their count (0 also when dir does not exist), one of their run ids in other ("" if none)
int tb_other_runs(const char* dir, const char* run_id, char* other, size_t n);
// one Event at `step` with a simple_value per numeric key of a flat JSON record (metrics.jsonl's: "step" and
// string values left out; nan / inf kept), flushed so that TensorBoard shows it at once. 0, or 1 with errno set.
int tb_write_record(TbWriter* w, double wall_time, long long step, const char* json);
int tb_close(TbWriter* w);   // 0, or 1 when the file could not be completed (errno)
