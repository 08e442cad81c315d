// validate.c — checks of a checkpoint's metadata (see validate.h).
#include "checkpoint/validate.h"
#include "checkpoint/ckpt.h"
#include "checkpoint/h5util.h"
#include "common/util.h"
#include "model/config.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ERR(...) do { snprintf(err, errlen, __VA_ARGS__); } while (0)

uint64_t ckpt_state_checksum(long long version, long long step, long long cursor, long long tokens, long long adam_t) {
    const long long v[5] = { version, step, cursor, tokens, adam_t };
    uint64_t s = 0;
    for (int i = 0; i < 5; i++) s += mix64((uint64_t)i * 0x9E3779B97F4A7C15ULL + (uint64_t)v[i]);
    return s;
}

// a decimal integer in [lo, hi], the whole string; 0 or -1
static int parse_ll(const char* s, long long lo, long long hi, long long* out) {
    char* end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int ckpt_read_state(hid_t f, const char* who, const char* path, CkptState* s, char* err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char fmt[64] = "";
    long long ver = -1;
    int rc = h5_attr_read_str(f, "format", fmt, sizeof fmt);
    if (rc == -2 && H5Aexists(f, "format") < 0) {   // the root group's header itself does not read
        ERR("%s: '%s' has corrupt HDF5 metadata: the attributes of its root group cannot be read", who, path);
        return 1;
    }
    if (rc || strcmp(fmt, CKPT_FORMAT)) {
        ERR("%s: '%s' is not a ringlm checkpoint (attribute 'format' is %s%s%s)", who, path, rc ? "" : "'",
            rc == -1 ? "missing" : rc ? "not a short string" : fmt, rc ? "" : "'");
        return 1;
    }
    rc = h5_attr_read_i64(f, "format_version", &ver);
    if (rc) { ERR("%s: '%s' %s the attribute 'format_version'", who, path, h5_attr_problem(rc)); return 1; }
    if (ver != CKPT_VERSION) {
        ERR("%s: '%s' has format_version %lld; this build reads version %d", who, path, ver, CKPT_VERSION);
        return 1;
    }
    const char* names[4] = { "step", "data_cursor", "tokens_seen", "adam_t" };
    long long* vals[4] = { &s->step, &s->cursor, &s->tokens, &s->adam_t };
    for (int i = 0; i < 4; i++)
        if ((rc = h5_attr_read_i64(f, names[i], vals[i]))) {
            ERR("%s: '%s' %s the attribute '%s' (a 64-bit integer)", who, path, h5_attr_problem(rc), names[i]);
            return 1;
        }
    // seq_len of the file's own config: tokens_seen = data_cursor x seq_len
    char v[64] = "";
    rc = -1;
    if (h5_exists(f, "/config")) {
        hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
        if (g < 0) rc = -2;
        else { rc = h5_attr_read_str(g, "seq_len", v, sizeof v); H5Gclose(g); }
    }
    if (rc || parse_ll(v, 1, 1LL << 31, &s->seq_len)) {
        ERR("%s: '%s' %s /config:seq_len", who, path, rc == -1 ? "lacks" : "has a malformed");
        return 1;
    }
    if (s->step < 0 || s->step > CKPT_MAX_STEP) {
        ERR("%s: '%s': attribute 'step' = %lld is out of range [0, %lld] (corrupt or edited file)", who, path, s->step, CKPT_MAX_STEP);
        return 1;
    }
    if (s->adam_t < 0 || s->adam_t > s->step) {
        ERR("%s: '%s': attribute 'adam_t' = %lld is out of range [0, step = %lld] (corrupt or edited file)", who, path, s->adam_t, s->step);
        return 1;
    }
    if (s->cursor < 0 || s->cursor > CKPT_MAX_TOKENS / s->seq_len) {
        ERR("%s: '%s': attribute 'data_cursor' = %lld is out of range [0, %lld] (2^62 tokens of seq_len %lld; corrupt or edited file)",
            who, path, s->cursor, CKPT_MAX_TOKENS / s->seq_len, s->seq_len);
        return 1;
    }
    if (s->tokens != s->cursor * s->seq_len) {
        ERR("%s: '%s': attribute 'tokens_seen' = %lld is not data_cursor x seq_len = %lld x %lld (corrupt or edited file)",
            who, path, s->tokens, s->cursor, s->seq_len);
        return 1;
    }
    uint64_t want = 0;
    rc = h5_attr_read_u64(f, "state_checksum", &want);
    if (rc == -2) { ERR("%s: '%s' %s the attribute 'state_checksum' (uint64)", who, path, h5_attr_problem(rc)); return 1; }
    s->have_sum = rc == 0;
    if (s->have_sum && want != ckpt_state_checksum(ver, s->step, s->cursor, s->tokens, s->adam_t)) {
        ERR("%s: '%s': state_checksum mismatch: step %lld, data_cursor %lld, tokens_seen %lld or adam_t %lld were altered "
            "(corrupt or edited file)", who, path, s->step, s->cursor, s->tokens, s->adam_t);
        return 1;
    }
    return 0;
}

// ---- the structure check (runs in the child) ---------------------------------------------------------

typedef struct {
    const char* who;
    const char* path;
    char* err;
    size_t errlen;
    long long file_size;
    long objects;
    int bad;
    Config cfg;         // /config as read
} Walk;

#define WERR(w, ...) do { if (!(w)->bad) { snprintf((w)->err, (w)->errlen, __VA_ARGS__); (w)->bad = 1; } } while (0)

// one attribute: a name, a type and a dataspace that HDF5 can describe, at most 1 MiB, its value readable
static herr_t visit_attr(hid_t obj, const char* name, const H5A_info_t* info, void* vw) {
    (void)info;
    Walk* w = vw;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = a < 0 ? H5I_INVALID_HID : H5Aget_type(a);
    hid_t s = a < 0 ? H5I_INVALID_HID : H5Aget_space(a);
    hssize_t n = s < 0 ? -1 : H5Sget_simple_extent_npoints(s);
    size_t sz = t < 0 ? 0 : H5Tget_size(t);
    htri_t vl = t < 0 ? -1 : H5Tdetect_class(t, H5T_VLEN);
    htri_t vs = t < 0 ? -1 : H5Tis_variable_str(t);
    if (a < 0 || t < 0 || s < 0 || n < 0 || sz == 0 || vl < 0 || vs < 0 || (unsigned long long)n * sz > (1u << 20))
        WERR(w, "%s: '%s': the attribute '%s' is malformed (corrupt file)", w->who, w->path, name);
    else {   // read the value (variable-length values too, then given back)
        void* buf = calloc((size_t)(n ? n : 1), sz);
        if (!buf || H5Aread(a, t, buf) < 0) WERR(w, "%s: '%s': the attribute '%s' cannot be read (corrupt file)", w->who, w->path, name);
        else if (vl || vs) H5Dvlen_reclaim(t, s, H5P_DEFAULT, buf);
        free(buf);
    }
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return w->bad ? -1 : 0;
}
static void walk_attrs(Walk* w, hid_t obj, const char* what) {
    hsize_t idx = 0;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, w) < 0)
        WERR(w, "%s: '%s': the attributes of %s cannot be read (corrupt file)", w->who, w->path, what);
}

// /config: one-line strings; the known keys parse, and the model they describe validates
static herr_t visit_config(hid_t g, const char* name, const H5A_info_t* info, void* vw) {
    (void)info;
    Walk* w = vw;
    char v[CFG_STR + 32];
    int rc = h5_attr_read_str(g, name, v, sizeof v);
    if (rc) { WERR(w, "%s: '%s': /config:%s is not a string of at most %d characters (corrupt file)", w->who, w->path, name, CFG_STR + 31); return -1; }
    if (strchr(v, '\n')) { WERR(w, "%s: '%s': /config:%s holds a line break (corrupt file)", w->who, w->path, name); return -1; }
    char e[1024];
    if (config_key_kind(name) && config_set(&w->cfg, name, v, "checkpoint /config", e, sizeof e)) {
        WERR(w, "%s: '%s': %s", w->who, w->path, e);
        return -1;
    }
    return 0;
}

static void check_dataset(Walk* w, hid_t obj, const char* name) {
    hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
    if (d < 0) { WERR(w, "%s: '%s': the dataset /%s cannot be opened (corrupt file)", w->who, w->path, name); return; }
    hid_t t = H5Dget_type(d), s = H5Dget_space(d), pl = H5Dget_create_plist(d);
    if (t < 0 || s < 0 || pl < 0) WERR(w, "%s: '%s': the dataset /%s is malformed (corrupt file)", w->who, w->path, name);
    else {
        H5T_class_t cl = H5Tget_class(t);
        size_t es = H5Tget_size(t);
        int fp32 = cl == H5T_FLOAT && es == 4, bf16 = cl == H5T_INTEGER && es == 2 && H5Tget_sign(t) == H5T_SGN_NONE;
        int nd = H5Sget_simple_extent_ndims(s);
        hsize_t dims[2] = { 0, 1 };
        if (nd == 1 || nd == 2) { if (H5Sget_simple_extent_dims(s, dims, NULL) < 0) nd = -1; }
        unsigned long long numel = (unsigned long long)dims[0] * dims[1];
        H5D_layout_t lay = H5Pget_layout(pl);
        int nf = H5Pget_nfilters(pl);
        if (!fp32 && !bf16) WERR(w, "%s: '%s': the dataset /%s is neither fp32 nor bf16 (uint16)", w->who, w->path, name);
        else if ((nd != 1 && nd != 2) || dims[0] == 0 || dims[1] == 0 || dims[0] > (1ULL << 40) || dims[1] > (1ULL << 40) || numel > (1ULL << 40))
            WERR(w, "%s: '%s': the dataset /%s has a malformed shape (corrupt file)", w->who, w->path, name);
        else if (lay < 0 || nf < 0) WERR(w, "%s: '%s': the dataset /%s has a malformed layout (corrupt file)", w->who, w->path, name);
        else {
            uint64_t sum;
            int rc = h5_attr_read_u64(d, "checksum", &sum);
            if (rc == -2) WERR(w, "%s: '%s': /%s has a malformed 'checksum' attribute (a uint64 expected)", w->who, w->path, name);
            walk_attrs(w, d, name);
            // the storage: what the elements need (contiguous: exactly; chunked: at least, unless filtered),
            // inside the file; H5Dget_storage_size walks a chunked dataset's index
            unsigned long long need = numel * es, have = H5Dget_storage_size(d);
            haddr_t off = lay == H5D_CONTIGUOUS ? H5Dget_offset(d) : HADDR_UNDEF;
            if (!w->bad && lay == H5D_CONTIGUOUS && (have != need || off == HADDR_UNDEF || off + need > (unsigned long long)w->file_size))
                WERR(w, "%s: '%s': the data of /%s (%llu bytes) lies outside the file or is not stored (truncated or corrupt file)",
                     w->who, w->path, name, need);
            else if (!w->bad && lay == H5D_CHUNKED && nf == 0 && have < need)
                WERR(w, "%s: '%s': the chunks of /%s hold %llu of its %llu bytes (truncated or corrupt file)", w->who, w->path, name, have, need);
        }
    }
    if (pl >= 0) H5Pclose(pl);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
}

static herr_t visit_object(hid_t obj, const char* name, const H5O_info_t* info, void* vw) {
    Walk* w = vw;
    if (++w->objects > 1000000) { WERR(w, "%s: '%s' holds more than a million objects (not a checkpoint)", w->who, w->path); return -1; }
    if (!strcmp(name, ".")) return 0;   // the root: checked by the caller
    if (info->type == H5O_TYPE_GROUP) {
        hid_t g = H5Gopen2(obj, name, H5P_DEFAULT);
        if (g < 0) WERR(w, "%s: '%s': the group /%s cannot be opened (corrupt file)", w->who, w->path, name);
        else { walk_attrs(w, g, name); H5Gclose(g); }
    } else if (info->type == H5O_TYPE_DATASET) check_dataset(w, obj, name);
    else WERR(w, "%s: '%s': /%s is neither a group nor a dataset (not a checkpoint)", w->who, w->path, name);
    return w->bad ? -1 : 0;
}

// a link that must name a group
static int is_group(Walk* w, hid_t f, const char* p) {
    if (!h5_exists(f, p)) return 0;
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, p, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_GROUP) {
        WERR(w, "%s: '%s': %s is not a group (corrupt file)", w->who, w->path, p);
        return 0;
    }
    return 1;
}

static int check_structure(const char* who, const char* path, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st)) { ERR("%s: '%s' does not exist", who, path); return 1; }
    if (!S_ISREG(st.st_mode)) { ERR("%s: '%s' is not a regular file", who, path); return 1; }
    hid_t fapl = h5_fapl(NULL);
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) { ERR("%s: '%s' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)", who, path); return 1; }
    static Walk w;   // (the Config is large)
    memset(&w, 0, sizeof w);
    w.who = who; w.path = path; w.err = err; w.errlen = errlen; w.file_size = (long long)st.st_size;
    config_defaults(&w.cfg);
    CkptState s;
    if (ckpt_read_state(f, who, path, &s, err, errlen)) w.bad = 1;
    if (!w.bad) walk_attrs(&w, f, "the root group");
    if (!w.bad && is_group(&w, f, "/config")) {
        hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
        hsize_t idx = 0;
        if (g < 0 || H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, visit_config, &w) < 0)
            WERR(&w, "%s: '%s': the attributes of /config cannot be read (corrupt file)", who, path);
        if (g >= 0) H5Gclose(g);
        char e[1024];
        if (!w.bad && config_validate(&w.cfg, e, sizeof e)) WERR(&w, "%s: '%s' holds an invalid /config: %s", who, path, e);
    } else if (!w.bad) WERR(&w, "%s: '%s' lacks the group /config", who, path);
    if (!w.bad && !is_group(&w, f, "/model") && !w.bad) WERR(&w, "%s: '%s' lacks the group /model", who, path);
    if (!w.bad && is_group(&w, f, "/optimizer") && !(is_group(&w, f, "/optimizer/m") && is_group(&w, f, "/optimizer/v")) && !w.bad)
        WERR(&w, "%s: '%s' has /optimizer without both /optimizer/m and /optimizer/v", who, path);
    if (!w.bad && H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, visit_object, &w, H5O_INFO_BASIC) < 0)
        WERR(&w, "%s: '%s': its objects cannot be listed (corrupt file)", who, path);
    if (H5Fclose(f) < 0) WERR(&w, "%s: '%s' cannot be closed (corrupt file)", who, path);
    return w.bad;
}

// ---- containment: the check runs in a child process ---------------------------------------------------

typedef int (*ContainedJob)(const char* who, const char* path, char* out, size_t outlen);
static int check_structure(const char* who, const char* path, char* out, size_t outlen);
static int read_run_id(const char* who, const char* path, char* out, size_t outlen);
static const struct { const char* name; ContainedJob job; } JOBS[] = { { "structure", check_structure }, { "run_id", read_run_id } };
#define NJOBS (int)(sizeof JOBS / sizeof JOBS[0])

// the child's part: no output but the pipe fd, its address space limited to what it holds now + 4 GiB (a corrupt
// size field cannot make HDF5 take the machine's memory), the verdict on the pipe, then _exit (no handler of the
// program runs)
static void contained_run(ContainedJob job, const char* who, const char* path, int fd) {
    signal(SIGPIPE, SIG_IGN);
    int null = open("/dev/null", O_WRONLY);   // whatever HDF5 might print stays out of the job's output
    if (null >= 0) { dup2(null, 1); dup2(null, 2); close(null); }
    long pages = 0;
    FILE* sm = fopen("/proc/self/statm", "r");
    if (sm) { if (fscanf(sm, "%ld", &pages) != 1) pages = 0; fclose(sm); }
    struct rlimit rl;
    if (pages > 0 && !getrlimit(RLIMIT_AS, &rl)) {
        rlim_t lim = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (4ULL << 30);
        if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > lim) { rl.rlim_cur = lim; setrlimit(RLIMIT_AS, &rl); }
    }
    char e[2048] = "\x06";   // ACK + result: the job succeeded (said on the pipe too: the parent may not see the status)
    int rc = job(who, path, e + 1, sizeof e - 1);
    const char* said = rc ? e + 1 : e;
    ssize_t k = write(fd, said, strlen(said)); (void)k;
    close(fd);
    _exit(rc ? 3 : 0);
}

// The child is a new image of this program (fork, then exec of /proc/self/exe), not only a fork: a forked copy of a
// process with threads (MPI's and PMIx's progress threads, the watchdog, a sanitizer's allocator) inherits every lock
// another thread held at the fork, and could wait for ever on one of them; a new image holds none. Its start-up (this
// constructor, before main and before MPI) finds RINGLM_CONTAINED = "JOB FD" and runs the job instead of the program.
__attribute__((constructor)) static void contained_child(void) {
    const char* spec = getenv("RINGLM_CONTAINED");
    if (!spec) return;
    char name[32];
    int fd;
    const char* who = getenv("RINGLM_CONTAINED_WHO");
    const char* path = getenv("RINGLM_CONTAINED_PATH");
    if (sscanf(spec, "%31s %d", name, &fd) == 2 && who && path)
        for (int i = 0; i < NJOBS; i++)
            if (!strcmp(name, JOBS[i].name)) contained_run(JOBS[i].job, who, path, fd);
    _exit(4);
}

// job(who, path, out) in a child process: 0 with its result in out (a string, may be empty), or 1 with one line
// in out (the job's message, or how the child died or that it ran out of time)
static int contained(ContainedJob job, const char* who, const char* path, char* err, size_t errlen) {
    const char* te = getenv("RINGLM_CKPT_CHECK_TIMEOUT_S");
    double timeout = te && atof(te) > 0 ? atof(te) : 120;
    int pfd[2];
    fflush(stdout); fflush(stderr);
    if (pipe(pfd)) return job(who, path, err, errlen);   // no child possible: run in-process
    // the new image's environment, made before the fork (the child only calls execve: nothing that may take a lock)
    extern char** environ;
    const char* jname = NULL;
    for (int i = 0; i < NJOBS; i++) if (JOBS[i].job == job) jname = JOBS[i].name;
    size_t ne = 0;
    while (environ[ne]) ne++;
    char** envp = calloc(ne + 4, sizeof *envp);
    char *e1 = malloc(64), *e2 = malloc(strlen(who) + 32), *e3 = malloc(strlen(path) + 32);
    if (!envp || !e1 || !e2 || !e3 || !jname) { free(envp); free(e1); free(e2); free(e3); close(pfd[0]); close(pfd[1]); return job(who, path, err, errlen); }
    snprintf(e1, 64, "RINGLM_CONTAINED=%s %d", jname, pfd[1]);
    sprintf(e2, "RINGLM_CONTAINED_WHO=%s", who);
    sprintf(e3, "RINGLM_CONTAINED_PATH=%s", path);
    size_t k = 0;
    envp[k++] = e1; envp[k++] = e2; envp[k++] = e3;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "RINGLM_CONTAINED", 16)) envp[k++] = environ[i];
    envp[k] = NULL;
    char* const argv[] = { (char*)"ringlm-checkpoint-check", NULL };
    pid_t pid = fork();
    if (pid < 0) { free(envp); free(e1); free(e2); free(e3); close(pfd[0]); close(pfd[1]); return job(who, path, err, errlen); }
    if (pid == 0) {
        close(pfd[0]);
        execve("/proc/self/exe", argv, envp);
        contained_run(job, who, path, pfd[1]);   // no new image possible (no /proc): the check in this copy
    }
    free(envp); free(e1); free(e2); free(e3);
    close(pfd[1]);
    char buf[2048];
    size_t got = 0;
    double t_end = now_s() + timeout;
    int timed_out = 0;
    for (;;) {   // read the child's message until it closes the pipe (exits) or the time is up
        double left = t_end - now_s();
        if (left <= 0) { timed_out = 1; break; }
        struct pollfd p = { pfd[0], POLLIN, 0 };
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t k = read(pfd[0], buf + got, sizeof buf - 1 - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
        if (got == sizeof buf - 1) break;
    }
    close(pfd[0]);
    buf[got] = 0;
    if (timed_out) kill(pid, SIGKILL);
    int status = 0, waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {}
    if (timed_out) {
        ERR("%s: '%s': reading its HDF5 metadata did not finish within %.0f s (corrupt file? RINGLM_CKPT_CHECK_TIMEOUT_S "
            "sets the limit)", who, path, timeout);
        return 1;
    }
    // the verdict is what the child said on the pipe: the ACK byte, or its one line; nothing means it died
    // (its status tells how, unless someone else reaped it)
    if (buf[0] == '\x06' && (waited < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 0))) {
        snprintf(err, errlen, "%s", buf + 1);
        return 0;
    }
    if (got && buf[0] != '\x06') { snprintf(err, errlen, "%s", buf); return 1; }
    if (waited < 0) ERR("%s: '%s' has corrupt HDF5 metadata: the HDF5 library died reading it", who, path);
    else if (WIFSIGNALED(status))
        ERR("%s: '%s' has corrupt HDF5 metadata: the HDF5 library crashed reading it (signal %d)", who, path, WTERMSIG(status));
    else ERR("%s: '%s' has corrupt HDF5 metadata: the HDF5 library failed reading it (exit status %d)", who, path, WEXITSTATUS(status));
    return 1;
}

int ckpt_check_file(const char* who, const char* path, char* err, size_t errlen) {
    char out[2048];
    if (contained(check_structure, who, path, out, sizeof out)) { snprintf(err, errlen, "%s", out); return 1; }
    return 0;
}

static int read_run_id(const char* who, const char* path, char* out, size_t n) {
    hid_t fapl = h5_fapl(NULL);
    hid_t f = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) { snprintf(out, n, "%s: '%s' cannot be opened as HDF5", who, path); return 1; }
    int rc = h5_attr_read_str(f, "run_id", out, n);
    if (rc == -1) out[0] = 0;
    else if (rc) snprintf(out, n, "%s: '%s' has a malformed run_id", who, path);
    H5Fclose(f);
    return rc == -2;
}

int ckpt_file_run_id(const char* path, char* id, size_t n) {
    char out[2048];
    if (contained(read_run_id, "checkpoint", path, out, sizeof out) || strlen(out) >= n) return 1;
    snprintf(id, n, "%s", out);
    return 0;
}
