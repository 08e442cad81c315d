// rundir.c — see rundir.h.
#include "common/rundir.h"
#include "common/files.h"
#include "common/util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ERR(...) snprintf(err, errlen, __VA_ARGS__)

// ---- the lock ----------------------------------------------------------------------------------------------
static int lock_fd = -1;
static pid_t lock_pid;
static char lock_path[PATH_MAX + 32];

void rundir_unlock(void) {
    // only the process that took it (a forked child exiting must not remove its parent's lock)
    if (lock_fd < 0 || getpid() != lock_pid) return;
    unlink(lock_path);   // removed while still held: a run waiting on this file retries on the new one
    close(lock_fd);
    lock_fd = -1;
}

static void read_line(int fd, char* buf, size_t n) {
    ssize_t k = pread(fd, buf, n - 1, 0);
    buf[k > 0 ? k : 0] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
}

int rundir_lock(const char* dir, char* note, size_t notelen, char* err, size_t errlen) {
    note[0] = 0;
    snprintf(lock_path, sizeof lock_path, "%s/train.lock", dir);
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) { ERR("train: cannot create the lock file '%s': %s", lock_path, strerror(errno)); return 1; }
        if (flock(fd, LOCK_EX | LOCK_NB)) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                char who[512];
                read_line(fd, who, sizeof who);
                close(fd);
                ERR("train: out_dir '%s' is in use by a running job (%s; lock file %s); --force does not override a "
                    "live run's lock: wait for it to end, stop it, or choose another out_dir", dir,
                    who[0] ? who : "holder not yet recorded: it is starting now", lock_path);
                return 1;
            }
            close(fd);
            if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) {   // a file system without locks: go on unprotected
                snprintf(note, notelen, "the file system of '%s' cannot lock files (%s): a concurrent run in this "
                         "out_dir would not be detected", dir, strerror(e));
                return 0;
            }
            ERR("train: cannot lock '%s': %s", lock_path, strerror(e));
            return 1;
        }
        // the previous holder removes the file as it exits: make sure we hold the file that is there now
        struct stat a, b;
        if (fstat(fd, &a) || stat(lock_path, &b) || a.st_ino != b.st_ino || a.st_dev != b.st_dev) { close(fd); continue; }
        char old[512];
        read_line(fd, old, sizeof old);
        if (old[0])
            snprintf(note, notelen, "out_dir '%s' was locked by %s, which is no longer running (killed or crashed): "
                     "its lock is taken over", dir, old);
        char host[256] = "?", line[512], when[64];
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        time_t t = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        int k = snprintf(line, sizeof line, "host %s pid %d since %s\n", host, (int)getpid(), when);
        if (ftruncate(fd, 0) || pwrite(fd, line, k, 0) != k) {
            ERR("train: cannot write the lock file '%s': %s", lock_path, strerror(errno));
            unlink(lock_path);
            close(fd);
            return 1;
        }
        lock_fd = fd;
        lock_pid = getpid();
        atexit(rundir_unlock);
        return 0;
    }
    ERR("train: cannot take the lock '%s': it keeps being replaced (another run starting and stopping?)", lock_path);
    return 1;
}

// ---- the run id --------------------------------------------------------------------------------------------
void rundir_new_id(char* id, size_t n) {
    uint64_t r = 0;
    FILE* f = fopen("/dev/urandom", "rb");
    if (!f || fread(&r, sizeof r, 1, f) != 1) r = mix64((uint64_t)getpid() ^ ((uint64_t)(now_s() * 1e9) << 20));
    if (f) fclose(f);
    time_t t = time(NULL);
    struct tm tm;
    char when[32];
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", gmtime_r(&t, &tm));
    snprintf(id, n, "%s-%08x", when, (unsigned)(r & 0xffffffffu));
}

int rundir_read_id(const char* dir, char* id, size_t n) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/run_id", dir);
    id[0] = 0;
    FILE* f = fopen(p, "r");
    if (!f) return 0;
    if (!fgets(id, (int)n, f)) id[0] = 0;
    fclose(f);
    id[strcspn(id, "\r\n")] = 0;
    return id[0] != 0;
}

int rundir_write_id(const char* dir, const char* id, char* err, size_t errlen) {
    char p[PATH_MAX + 16], t[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/run_id", dir);
    snprintf(t, sizeof t, "%s/run_id.tmp", dir);
    FILE* f = fopen(t, "w");
    if (!f || fprintf(f, "%s\n", id) < 0 || fflush(f) || fsync(fileno(f))) {
        ERR("train: cannot write '%s': %s", t, strerror(errno));
        if (f) { fclose(f); unlink(t); }
        return 1;
    }
    fclose(f);
    if (rename(t, p)) { ERR("train: cannot rename '%s' to '%s': %s", t, p, strerror(errno)); unlink(t); return 1; }
    return 0;
}

int rundir_holds(const char* dir, const char* path) {
    char d[PATH_MAX], f[PATH_MAX], pdir[PATH_MAX + 1];
    snprintf(pdir, sizeof pdir, "%s", path);
    char* slash = strrchr(pdir, '/');
    if (slash) { if (slash == pdir) slash[1] = 0; else *slash = 0; } else snprintf(pdir, sizeof pdir, ".");
    if (!realpath(dir, d) || !realpath(pdir, f)) return 0;
    return strcmp(d, f) == 0;
}

// ---- what lies past a step ---------------------------------------------------------------------------------
static long long record_step(const char* line) {   // the "step" of a metrics.jsonl record, or -1
    const char* s = strstr(line, "\"step\":");
    return s ? strtoll(s + 7, NULL, 10) : -1;
}

static long long ckpt_number(const char* name) {   // N of "ckpt_N.h5" (8 digits), or -1
    if (strncmp(name, "ckpt_", 5) || strlen(name) != 16 || strcmp(name + 13, ".h5")) return -1;
    for (int i = 5; i < 13; i++) if (name[i] < '0' || name[i] > '9') return -1;
    return strtoll(name + 5, NULL, 10);
}

void rundir_later(const char* dir, long long step, RunLater* l) {
    memset(l, 0, sizeof *l);
    char p[PATH_MAX + 32], line[8192];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE* f = fopen(p, "r");
    while (f && fgets(line, sizeof line, f)) {
        long long s = record_step(line);
        if (s > step) { l->metrics++; if (s > l->metrics_max) l->metrics_max = s; }
    }
    if (f) fclose(f);
    DIR* d = opendir(dir);
    struct dirent* e;
    while (d && (e = readdir(d))) {
        long long n = ckpt_number(e->d_name);
        if (n <= step) continue;
        l->ckpts++;
        if (n > l->ckpts_max) l->ckpts_max = n;
    }
    if (d) closedir(d);
}

// all = 1: every line goes aside (a fresh run with --force), else the records past `step`
static int cut_metrics(const char* dir, long long step, int all, char* err, size_t errlen) {
    char p[PATH_MAX + 32], t[PATH_MAX + 48], s[PATH_MAX + 48], line[8192];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    snprintf(t, sizeof t, "%s/metrics.jsonl.tmp", dir);
    snprintf(s, sizeof s, "%s/metrics.superseded.jsonl", dir);
    FILE* in = fopen(p, "r");
    if (!in) return 0;
    FILE* keep = fopen(t, "w");
    FILE* aside = fopen(s, "a");
    int bad = !keep || !aside;
    int cont = 0, out = 0;   // cont: the piece read continues a line longer than the buffer (same destination)
    while (!bad && fgets(line, sizeof line, in)) {
        if (!cont) out = all || record_step(line) > step;
        bad = fputs(line, out ? aside : keep) < 0;
        size_t l = strlen(line);
        cont = l && line[l - 1] != '\n';
    }
    if (!bad && cont) bad = fputc('\n', out ? aside : keep) == EOF;   // a cut-off last line: ended here
    fclose(in);
    if (keep && (fflush(keep) || fsync(fileno(keep)))) bad = 1;
    if (aside && (fflush(aside) || fsync(fileno(aside)))) bad = 1;
    if (keep && fclose(keep)) bad = 1;
    if (aside && fclose(aside)) bad = 1;
    if (bad || rename(t, p)) {
        if (all) ERR("train: cannot set aside the records of '%s' (to metrics.superseded.jsonl): %s", p, strerror(errno));
        else ERR("train: cannot set aside the records of metrics.jsonl past step %lld in '%s': %s", step, dir, strerror(errno));
        unlink(t);
        return 1;
    }
    return 0;
}

// rename DIR/NAME to DIR/NAME.superseded (.superseded.2, ... when taken: one set aside before is kept too)
static int set_aside(const char* dir, const char* name, char* err, size_t errlen) {
    char a[PATH_MAX + 300], b[PATH_MAX + 320];
    snprintf(a, sizeof a, "%s/%s", dir, name);
    snprintf(b, sizeof b, "%s/%s.superseded", dir, name);
    struct stat st;
    for (int i = 2; i < 100000 && lstat(b, &st) == 0; i++) snprintf(b, sizeof b, "%s/%s.superseded.%d", dir, name, i);
    if (rename(a, b)) { ERR("train: cannot rename '%s' to '%s': %s", a, b, strerror(errno)); return 1; }
    return 0;
}

int rundir_supersede(const char* dir, long long step, const char* resumed, char* err, size_t errlen) {
    if (cut_metrics(dir, step, 0, err, errlen)) return 1;
    char latest[256] = "", p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE* f = fopen(p, "r");
    if (f) { if (!fgets(latest, sizeof latest, f)) latest[0] = 0; fclose(f); }
    latest[strcspn(latest, "\r\n")] = 0;
    const char* rname = strrchr(resumed, '/');
    rname = rname ? rname + 1 : resumed;
    int in_dir = rundir_holds(dir, resumed);
    DIR* d = opendir(dir);
    struct dirent* e;
    int bad = 0;
    while (d && !bad && (e = readdir(d))) {
        if (ckpt_number(e->d_name) <= step || (in_dir && !strcmp(e->d_name, rname))) continue;   // (not the resumed one)
        bad = set_aside(dir, e->d_name, err, errlen);
    }
    if (d) closedir(d);
    if (bad) return 1;
    if (ckpt_number(latest) > step && strcmp(latest, rname)) {   // `latest` named a checkpoint set aside
        char t[PATH_MAX + 48];
        snprintf(t, sizeof t, "%s/latest.tmp", dir);
        if (in_dir) {
            FILE* o = fopen(t, "w");
            if (!o || fprintf(o, "%s\n", rname) < 0 || fflush(o) || fsync(fileno(o)) || fclose(o) || rename(t, p)) {
                ERR("train: cannot point '%s' at %s: %s", p, rname, strerror(errno));
                return 1;
            }
        } else if (set_aside(dir, "latest", err, errlen)) return 1;   // (renamed, like the checkpoints)
    }
    fsync_path(dir);
    return 0;
}

// ---- what a fresh run finds ---------------------------------------------------------------------------------
void rundir_found(const char* dir, RunFound* fd) {
    memset(fd, 0, sizeof *fd);
    fd->ckpt_min = -1;
    char p[PATH_MAX + 32], line[8192];
    struct stat st;
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    if (stat(p, &st) == 0) {
        fd->has_metrics = 1;
        fd->metrics_bytes = (long long)st.st_size;
        FILE* f = fopen(p, "r");
        while (f && fgets(line, sizeof line, f)) if (record_step(line) >= 0) fd->metrics++;
        if (f) fclose(f);
    }
    snprintf(p, sizeof p, "%s/latest", dir);
    if (lstat(p, &st) == 0) {
        fd->latest = 1;
        FILE* f = fopen(p, "r");
        if (!f || !fgets(fd->latest_name, sizeof fd->latest_name, f)) fd->latest_name[0] = 0;
        if (f) fclose(f);
        fd->latest_name[strcspn(fd->latest_name, "\r\n")] = 0;
    }
    DIR* d = opendir(dir);
    struct dirent* e;
    while (d && (e = readdir(d))) {
        long long n = ckpt_number(e->d_name);
        if (n < 0) continue;
        fd->ckpts++;
        if (fd->ckpt_min < 0 || n < fd->ckpt_min) fd->ckpt_min = n;
        if (n > fd->ckpt_max) fd->ckpt_max = n;
    }
    if (d) closedir(d);
}

int rundir_set_aside(const char* dir, char* err, size_t errlen) {
    if (cut_metrics(dir, -1, 1, err, errlen)) return 1;
    DIR* d = opendir(dir);
    struct dirent* e;
    int bad = 0;
    while (d && !bad && (e = readdir(d)))
        if (ckpt_number(e->d_name) >= 0) bad = set_aside(dir, e->d_name, err, errlen);
    if (d) closedir(d);
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/latest", dir);
    if (!bad && lstat(p, &st) == 0) bad = set_aside(dir, "latest", err, errlen);
    fsync_path(dir);
    return bad;
}
