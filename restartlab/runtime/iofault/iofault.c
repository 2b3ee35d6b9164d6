/* restartlab's storage faults, below every writer (LD_PRELOAD; restartlab/runtime/iofault/__init__.py
 * builds it and says what each fault does).
 *
 * A rank's file opened for writing under RESTARTLAB_IOFAULT_DIR (its real path: symlinks resolved,
 * DCP's writer, torch.save's C++ stream, safetensors' Rust File and Python's open alike) is "ours".
 * When ours is opened the control file RESTARTLAB_IOFAULT_CTL is read (the injector writes it, whole,
 * when it strikes); a strike aimed at this rank (or every rank) arms the file. The first write to an
 * armed file takes the strike, once per rank and strike across the rank's processes (an O_EXCL marker
 * beside the control file, holding when it was taken), and then:
 *   stall  every write of ours blocks until T s after the take (a starved OST);
 *   slow   every write of ours is held len/rate s, for `duration` s after the take (0: for good);
 *   error  once `after` bytes of ours are written, write/fsync/rename of ours fail with `errno`, for
 *          `duration` s after the take (0: for good, in every later process of the rank too);
 *   torn   the write is cut after `after` bytes of the file (0: half of this write), synced, and
 *          the process SIGKILLed at that moment.
 * Each take and its end is one JSON line appended to RESTARTLAB_IOFAULT_LOG. Nothing is faulted
 * while no strike is armed: an open of ours costs one readlink and one failed open of the control
 * file, a write one array lookup. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
enum { K_NONE, K_STALL, K_SLOW, K_ERROR, K_TORN };
static const char *KIND_NAMES[] = {"none", "stall", "slow", "error", "torn"};

struct strike {
    long id;
    int kind, rank, err;
    double seconds, rate, duration;
    long long after;
    double taken;          /* when this rank took it (0: not yet) */
    long long written;     /* bytes of ours written since the take */
    int logged_error, logged_end;
    int spent;             /* a torn strike an earlier process of this rank took: nothing more here */
};

static char dir_real[PATH_MAX];
static size_t dir_len;
static const char *ctl_path, *log_path;
static int my_rank = -1;
static long armed[MAXFD];  /* fd -> the strike id it was opened under (0: none, -1: ours, unarmed) */
static struct strike cur;  /* the newest strike this process has read */
static long long cur_size = -1;  /* a cut file's length, for its event */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int ready;

static int (*r_open)(const char *, int, ...);
static int (*r_open64)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static int (*r_openat64)(int, const char *, int, ...);
static int (*r_creat)(const char *, mode_t);
static int (*r_creat64)(const char *, mode_t);
static FILE *(*r_fopen)(const char *, const char *);
static FILE *(*r_fopen64)(const char *, const char *);
static int (*r_fclose)(FILE *);
static int (*r_close)(int);
static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_pwritev)(int, const struct iovec *, int, off_t);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static int (*r_rename)(const char *, const char *);
static int (*r_renameat)(int, const char *, int, const char *);
static int (*r_renameat2)(int, const char *, int, const char *, unsigned int);

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

static void hold(double s) {  /* sleep s seconds, whatever signals arrive meanwhile */
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)}, left;
    while (nanosleep(&ts, &left) != 0 && errno == EINTR) ts = left;
}

static void resolve(void) {
#define R(name) if (!r_##name) r_##name = dlsym(RTLD_NEXT, #name)
    R(open); R(open64); R(openat); R(openat64); R(creat); R(creat64); R(fopen); R(fopen64); R(fclose);
    R(close); R(write); R(pwrite); R(pwrite64); R(writev); R(pwritev); R(fsync); R(fdatasync);
    R(rename); R(renameat); R(renameat2);
#undef R
}
#define RESOLVED(name) (r_##name ? 0 : (resolve(), 0))

static void atfork_child(void) { pthread_mutex_init(&mu, NULL); }  /* a fork while another thread held it */

__attribute__((constructor)) static void init(void) {
    resolve();
    pthread_atfork(NULL, NULL, atfork_child);
    const char *d = getenv("RESTARTLAB_IOFAULT_DIR");
    ctl_path = getenv("RESTARTLAB_IOFAULT_CTL");
    log_path = getenv("RESTARTLAB_IOFAULT_LOG");
    if (!d || !*d || !ctl_path || !*ctl_path) return;
    if (!realpath(d, dir_real)) {  /* not made yet: its parent's real path and its name */
        char parent[PATH_MAX], *slash;
        snprintf(parent, sizeof parent, "%s", d);
        slash = strrchr(parent, '/');
        if (!slash || slash == parent) { snprintf(dir_real, sizeof dir_real, "%s", d); }
        else {
            *slash = 0;
            char rp[PATH_MAX], whole[PATH_MAX * 2 + 2];
            snprintf(whole, sizeof whole, "%s/%s", realpath(parent, rp) ? rp : parent, slash + 1);
            snprintf(dir_real, sizeof dir_real, "%.*s", (int)sizeof dir_real - 1, whole);
        }
    }
    dir_len = strlen(dir_real);
    while (dir_len > 1 && dir_real[dir_len - 1] == '/') dir_real[--dir_len] = 0;
    static const char *vars[] = {"RANK", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "PALS_RANKID",
                                 "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) { my_rank = atoi(v); break; }
    }
    ready = 1;
}

static int under_dir(const char *p) {
    return strncmp(p, dir_real, dir_len) == 0 && (p[dir_len] == '/' || p[dir_len] == 0);
}

static int fd_path(int fd, char *out, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, out, n - 1);
    if (k < 0) return -1;
    out[k] = 0;
    return 0;
}

static void json_str(char *out, size_t n, const char *s) {  /* s as a JSON string body */
    size_t j = 0;
    for (; *s && j + 7 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[j++] = '\\'; out[j++] = c; }
        else if (c < 0x20) j += snprintf(out + j, n - j, "\\u%04x", c);
        else out[j++] = c;
    }
    out[j] = 0;
}

static void log_event(const char *event, const char *file, double at, long long bytes) {
    if (!log_path || !*log_path) return;
    char host[256] = "", fesc[PATH_MAX * 2] = "", desc[PATH_MAX * 2] = "", line[PATH_MAX * 5];
    json_str(desc, sizeof desc, dir_real);
    gethostname(host, sizeof host - 1);
    if (file) json_str(fesc, sizeof fesc, file);
    int n = snprintf(line, sizeof line,
                     "{\"id\": %ld, \"kind\": \"%s\", \"event\": \"%s\", \"rank\": %d, \"pid\": %d, \"host\": \"%s\", "
                     "\"at\": %.6f, \"file\": %s%s%s, \"bytes\": %lld, \"errno\": %d, \"seconds\": %g, \"rate\": %g, "
                     "\"duration\": %g, \"after\": %lld, \"dir\": \"%s\", \"size\": %lld}\n",
                     cur.id, KIND_NAMES[cur.kind], event, my_rank, (int)getpid(), host, at, file ? "\"" : "",
                     file ? fesc : "null", file ? "\"" : "", bytes, cur.err, cur.seconds, cur.rate, cur.duration,
                     cur.after, desc, cur_size);
    int fd = r_open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (n > (int)sizeof line) n = sizeof line;
    ssize_t w = r_write(fd, line, n);
    (void)w;
    r_close(fd);
}

/* The control file, read whole: "id=3 kind=stall rank=-1 seconds=5 rate=0 errno=5 after=0 duration=0". */
static void read_ctl(void) {
    int fd = r_open(ctl_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    r_close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    struct strike s = {0};
    s.rank = -1;
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (!strcmp(k, "id")) s.id = atol(v);
        else if (!strcmp(k, "kind")) {
            for (int i = 1; i <= K_TORN; i++) if (!strcmp(v, KIND_NAMES[i])) s.kind = i;
        } else if (!strcmp(k, "rank")) s.rank = atoi(v);
        else if (!strcmp(k, "seconds")) s.seconds = atof(v);
        else if (!strcmp(k, "rate")) s.rate = atof(v);
        else if (!strcmp(k, "errno")) s.err = atoi(v);
        else if (!strcmp(k, "after")) s.after = atoll(v);
        else if (!strcmp(k, "duration")) s.duration = atof(v);
    }
    if (s.id <= 0 || s.kind == K_NONE || s.id == cur.id) return;
    if (s.rank >= 0 && s.rank != my_rank) return;
    cur = s;
}

/* The marker beside the control file: this rank took strike `id`, at the time it holds. Made whole,
 * then linked into place (link fails if it is there): a process of the same rank that loses the race
 * reads a whole time, never an empty file. Returns 1 if this call took it, 0 if another process of
 * the rank had (cur.taken then holds that time). RESTARTLAB_IOFAULT_TAKE_DELAY (seconds, a test's
 * fault point) holds a process between making its marker and linking it. */
static int take(void) {
    char marker[PATH_MAX + 64], tmp[PATH_MAX + 96], buf[64];
    snprintf(marker, sizeof marker, "%s.%ld.r%d", ctl_path, cur.id, my_rank);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", marker, (int)getpid());
    double t = now();
    int fd = r_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        int n = snprintf(buf, sizeof buf, "%.6f\n", t);
        ssize_t w = r_write(fd, buf, n);
        (void)w;
        r_close(fd);
        const char *delay = getenv("RESTARTLAB_IOFAULT_TAKE_DELAY");
        if (delay) hold(atof(delay));
        int won = link(tmp, marker) == 0, why = errno;
        unlink(tmp);
        if (!won && why != EEXIST) {  /* no hard links here (or a lost reply): create it in place */
            int m = r_open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (m >= 0) {
                ssize_t w2 = r_write(m, buf, n);
                (void)w2;
                r_close(m);
                won = 1;
            }
        }
        if (won) { cur.taken = t; return 1; }
    }
    fd = r_open(marker, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        r_close(fd);
        buf[n > 0 ? n : 0] = 0;
        cur.taken = atof(buf);
    }
    if (cur.taken <= 0) cur.taken = t;  /* no marker could be made or read: this process alone */
    cur.written = cur.after;  /* what it counted is past */
    return 0;
}

static void opened(int fd, int writing) {
    if (fd < 0 || fd >= MAXFD) return;
    armed[fd] = 0;
    if (!ready || !writing) return;
    int saved = errno;  /* the open succeeded: what we look at after it is not the caller's errno */
    char p[PATH_MAX];
    if (fd_path(fd, p, sizeof p) == 0 && under_dir(p)) {
        pthread_mutex_lock(&mu);
        read_ctl();
        armed[fd] = cur.id > 0 ? cur.id : -1;
        pthread_mutex_unlock(&mu);
    }
    errno = saved;
}

static int flags_write(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_CREAT); }
static int mode_write(const char *m) { return m && (strchr(m, 'w') || strchr(m, 'a') || strchr(m, '+')); }

/* Before `len` bytes of ours go to `fd`: how many may go (len, fewer for a cut), or -1 with errno.
 * A torn strike's `after` counts the rank's bytes of ours since the take, across files and saves (0:
 * half of the first write): a save whose files are all shorter than it is cut in a later one. */
static ssize_t before_write(int fd, size_t len, int *cut) {
    *cut = 0;
    if (fd < 0 || fd >= MAXFD || armed[fd] <= 0) return (ssize_t)len;
    pthread_mutex_lock(&mu);
    if (armed[fd] != cur.id) { pthread_mutex_unlock(&mu); return (ssize_t)len; }
    char p[PATH_MAX];
    int first = 0;
    if (cur.taken == 0) {
        first = take();
        if (fd_path(fd, p, sizeof p) != 0) p[0] = 0;
        if (first) log_event("begin", p, cur.taken, 0);
        else if (cur.kind == K_TORN) cur.spent = 1;
    }
    if (cur.spent) { armed[fd] = -1; pthread_mutex_unlock(&mu); return (ssize_t)len; }
    double t = now();
    struct strike s = cur;
    ssize_t allow = (ssize_t)len;
    if (s.kind == K_TORN) {
        long long keep = s.after > 0 ? s.after - cur.written : (long long)len / 2;
        if (keep < 0) keep = 0;
        if (keep >= (long long)len) {  /* the cut is further on */
            cur.written += (long long)len;
            pthread_mutex_unlock(&mu);
            return (ssize_t)len;
        }
        *cut = 1;
        allow = (ssize_t)keep;
    } else if (s.kind == K_ERROR) {
        int active = s.duration <= 0 || t < s.taken + s.duration;
        if (active && cur.written >= s.after) {
            if (!cur.logged_error) {
                cur.logged_error = 1;
                if (fd_path(fd, p, sizeof p) != 0) p[0] = 0;
                log_event("error", p, t, cur.written);
            }
            pthread_mutex_unlock(&mu);
            errno = s.err;
            return -1;
        }
        if (active && cur.written + (long long)len > s.after) allow = (ssize_t)(s.after - cur.written);
        cur.written += allow;
        if (!active && !cur.logged_end) { cur.logged_end = 1; log_event("end", NULL, s.taken + s.duration, cur.written); }
    }
    pthread_mutex_unlock(&mu);
    if (s.kind == K_STALL) {
        double until = s.taken + s.seconds;
        if (t < until) {
            hold(until - t);
            pthread_mutex_lock(&mu);
            if (!cur.logged_end && cur.id == s.id) { cur.logged_end = 1; log_event("end", NULL, now(), 0); }
            pthread_mutex_unlock(&mu);
        }
    } else if (s.kind == K_SLOW) {
        int active = s.duration <= 0 || t < s.taken + s.duration;
        if (active && s.rate > 0) hold((double)len / s.rate);
    }
    return allow;
}

/* The write was cut: `stop` is where its data stops in the file (the offset after the partial write,
 * a pwrite's own); the event also gives the file's length as left (a writer that sized the file first
 * leaves it full length, zeros from the cut on). */
static void cut_here(int fd, long long stop) {
    char p[PATH_MAX];
    struct stat st;
    if (fd_path(fd, p, sizeof p) != 0) p[0] = 0;
    r_fsync(fd);
    pthread_mutex_lock(&mu);
    cur_size = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
    log_event("cut", p, now(), stop);
    pthread_mutex_unlock(&mu);
    kill(getpid(), SIGKILL);
    for (;;) pause();
}

static int error_of(int fd) {  /* fsync, rename: -1 with errno while an error strike of ours is active */
    if (fd >= 0 && (fd >= MAXFD || armed[fd] <= 0)) return 0;
    pthread_mutex_lock(&mu);
    int bad = (fd < 0 || armed[fd] == cur.id) && cur.kind == K_ERROR && cur.taken > 0 && cur.written >= cur.after &&
              (cur.duration <= 0 || now() < cur.taken + cur.duration);
    int e = cur.err;
    pthread_mutex_unlock(&mu);
    if (bad) { errno = e; return -1; }
    return 0;
}

/* ---- the interposed calls ---- */
#define OPEN_MODE(flags) mode_t mode = 0; \
    if ((flags) & (O_CREAT | __O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); }

int open(const char *path, int flags, ...) { RESOLVED(open); OPEN_MODE(flags); int fd = r_open(path, flags, mode); opened(fd, flags_write(flags)); return fd; }
int open64(const char *path, int flags, ...) { RESOLVED(open64); OPEN_MODE(flags); int fd = r_open64(path, flags, mode); opened(fd, flags_write(flags)); return fd; }
int openat(int d, const char *path, int flags, ...) { RESOLVED(openat); OPEN_MODE(flags); int fd = r_openat(d, path, flags, mode); opened(fd, flags_write(flags)); return fd; }
int openat64(int d, const char *path, int flags, ...) { RESOLVED(openat64); OPEN_MODE(flags); int fd = r_openat64(d, path, flags, mode); opened(fd, flags_write(flags)); return fd; }
int creat(const char *path, mode_t mode) { RESOLVED(creat); int fd = r_creat(path, mode); opened(fd, 1); return fd; }
int creat64(const char *path, mode_t mode) { RESOLVED(creat64); int fd = r_creat64(path, mode); opened(fd, 1); return fd; }
FILE *fopen(const char *path, const char *m) { RESOLVED(fopen); FILE *f = r_fopen(path, m); if (f) opened(fileno(f), mode_write(m)); return f; }
FILE *fopen64(const char *path, const char *m) { RESOLVED(fopen64); FILE *f = r_fopen64(path, m); if (f) opened(fileno(f), mode_write(m)); return f; }
int fclose(FILE *f) { RESOLVED(fclose); if (f) { int fd = fileno(f); if (fd >= 0 && fd < MAXFD) armed[fd] = 0; } return r_fclose(f); }
static int (*r_dup2)(int, int);
static int (*r_dup3)(int, int, int);
/* the fd a dup lands on is closed first by the kernel: whatever it was, it is not ours now */
int dup2(int a, int b) { if (!r_dup2) r_dup2 = dlsym(RTLD_NEXT, "dup2"); int r = r_dup2(a, b); if (r >= 0 && r < MAXFD) armed[r] = 0; return r; }
int dup3(int a, int b, int f) { if (!r_dup3) r_dup3 = dlsym(RTLD_NEXT, "dup3"); int r = r_dup3(a, b, f); if (r >= 0 && r < MAXFD) armed[r] = 0; return r; }
int close(int fd) { RESOLVED(close); if (fd >= 0 && fd < MAXFD) armed[fd] = 0; return r_close(fd); }

#define WRITE_BODY(call, len) \
    if (!r_write || !r_pwritev) { resolve(); } \
    if (fd < 0 || fd >= MAXFD || armed[fd] <= 0) return call;  /* not ours, or nothing armed: untouched */ \
    int cut; ssize_t allow = before_write(fd, (len), &cut); \
    if (allow < 0) return -1; \
    if (!cut && (size_t)allow == (len)) return call; \
    ssize_t w = allow > 0 ? PARTIAL : 0; \
    if (cut) cut_here(fd, STOP); \
    return w;

ssize_t write(int fd, const void *buf, size_t len) {
#define PARTIAL r_write(fd, buf, allow)
#define STOP (long long)lseek(fd, 0, SEEK_CUR)
    WRITE_BODY(r_write(fd, buf, len), len)
#undef STOP
#undef PARTIAL
}
ssize_t pwrite(int fd, const void *buf, size_t len, off_t off) {
#define PARTIAL r_pwrite(fd, buf, allow, off)
#define STOP (long long)off + (w > 0 ? w : 0)
    WRITE_BODY(r_pwrite(fd, buf, len, off), len)
#undef STOP
#undef PARTIAL
}
ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) {
#define PARTIAL r_pwrite64(fd, buf, allow, off)
#define STOP (long long)off + (w > 0 ? w : 0)
    WRITE_BODY(r_pwrite64(fd, buf, len, off), len)
#undef STOP
#undef PARTIAL
}
static size_t iov_len(const struct iovec *iov, int n) { size_t s = 0; for (int i = 0; i < n; i++) s += iov[i].iov_len; return s; }
static ssize_t iov_first(int fd, const struct iovec *iov, int n, size_t allow, off_t off, int positioned) {
    size_t done = 0;  /* the first `allow` bytes of the vector, one piece at a time */
    for (int i = 0; i < n && done < allow; i++) {
        size_t k = iov[i].iov_len < allow - done ? iov[i].iov_len : allow - done;
        ssize_t w = positioned ? r_pwrite(fd, iov[i].iov_base, k, off + done) : r_write(fd, iov[i].iov_base, k);
        if (w < 0) return done ? (ssize_t)done : -1;
        done += w;
        if ((size_t)w < k) break;
    }
    return done;
}
ssize_t writev(int fd, const struct iovec *iov, int n) {
#define PARTIAL iov_first(fd, iov, n, allow, 0, 0)
#define STOP (long long)lseek(fd, 0, SEEK_CUR)
    WRITE_BODY(r_writev(fd, iov, n), iov_len(iov, n))
#undef STOP
#undef PARTIAL
}
ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
#define PARTIAL iov_first(fd, iov, n, allow, off, 1)
#define STOP (long long)off + (w > 0 ? w : 0)
    WRITE_BODY(r_pwritev(fd, iov, n, off), iov_len(iov, n))
#undef STOP
#undef PARTIAL
}
int fsync(int fd) { RESOLVED(fsync); if (error_of(fd)) return -1; return r_fsync(fd); }
int fdatasync(int fd) { RESOLVED(fdatasync); if (error_of(fd)) return -1; return r_fdatasync(fd); }

static int path_ours(int d, const char *path) {  /* a rename's source or target under the directory */
    if (!ready || !path) return 0;
    char full[PATH_MAX * 2 + 2], rp[PATH_MAX];
    if (path[0] == '/') snprintf(full, sizeof full, "%s", path);
    else if (d == AT_FDCWD) { if (!getcwd(rp, sizeof rp)) return 0; snprintf(full, sizeof full, "%s/%s", rp, path); }
    else { if (fd_path(d, rp, sizeof rp) != 0) return 0; snprintf(full, sizeof full, "%s/%s", rp, path); }
    char *slash = strrchr(full, '/');
    if (!slash) return 0;
    *slash = 0;  /* the file may not exist (a target): its directory's real path */
    if (!realpath(full[0] ? full : "/", rp)) return 0;
    return under_dir(rp);
}
static int rename_fails(int d1, const char *a, int d2, const char *b) {
    if (!ready || cur.kind != K_ERROR || cur.taken == 0) return 0;
    return (path_ours(d1, a) || path_ours(d2, b)) && error_of(-1);
}
int rename(const char *a, const char *b) { RESOLVED(rename); if (rename_fails(AT_FDCWD, a, AT_FDCWD, b)) return -1; return r_rename(a, b); }
int renameat(int d1, const char *a, int d2, const char *b) { RESOLVED(renameat); if (rename_fails(d1, a, d2, b)) return -1; return r_renameat(d1, a, d2, b); }
int renameat2(int d1, const char *a, int d2, const char *b, unsigned int f) { RESOLVED(renameat2); if (rename_fails(d1, a, d2, b)) return -1; return r_renameat2(d1, a, d2, b, f); }
