/* The delay engine's data path in C: the same bookkeeping as _core.py's
 * DelayCore (which stays the reference and the fallback), plus the netfilter
 * queue loop, run in a thread of its own with the GIL released.
 *
 * Theory of operation
 *   Python (the engine process) owns the queue socket, the control protocol
 *   and the LinkModel. It hands this library the socket's descriptor and,
 *   after every change to the model, the model's state: pointers to the delay
 *   matrix's rows (Python's arrays of doubles, not copied), each host's
 *   partition group and down flag, and the per-pair parameters (loss, jitter,
 *   reordering, duplication, bandwidth and queue) as a default plus sparse
 *   overrides. fp_run() then loops: read packets in batches (recvmmsg), give
 *   each its fate, answer at once or hold it in a heap until
 *       due = departure + delay - path_offset
 *   where departure is the kernel's arrival stamp, or, on a pair with a
 *   bandwidth, the end of its serialisation behind the packets queued before
 *   it (drop-tail at the queue's size); release what is due in batches of
 *   verdicts. A duplicated packet leaves with mark bit 1 and one whose queue is
 *   above the ECN threshold with mark bit 2: the core's nftables rules make
 *   the copy and set CE.
 *
 * Rules
 *   1. Every packet read gets exactly one verdict and is counted once
 *      (forwarded, dropped with a reason, or foreign), as in DelayCore.
 *   2. The state is guarded by one mutex; the loop holds it except while it
 *      sleeps, so a control change applies between two batches.
 *   3. Memory is bounded: the heap by the kernel's queue length, the pair
 *      tables by the pairs that talk.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NF_DROP 0
#define NF_ACCEPT 1
#define NFNL_SUBSYS_QUEUE 3
#define NFQNL_MSG_PACKET 0
#define NFQNL_MSG_VERDICT 1
#define NFQA_PACKET_HDR 1
#define NFQA_VERDICT_HDR 2
#define NFQA_MARK 3
#define NFQA_TIMESTAMP 4
#define NFQA_PAYLOAD 10
#define NFQA_CAP_LEN 13
#define NLA_TYPE_MASK 0x3FFF
#define NLM_F_REQUEST 1

enum { R_LOSS = 0, R_PARTITION = 1, R_DOWN = 2, R_QUEUE = 3, N_REASONS = 4 };
enum { J_NONE = 0, J_NORMAL = 1, J_UNIFORM = 2, J_PARETO = 3 };
#define MARK_DUP 0x1
#define MARK_CE 0x2
#define WINDOW 8192
#define READ_BATCH 64
#define BUF_BYTES 512
#define VERDICT_BYTES 40 /* with a mark attribute; 32 without */

/* One pair's parameters (a copy of what LinkModel says). */
typedef struct {
    double loss;
    int32_t jitter;     /* J_* */
    double j1, j2;      /* normal: sigma_s; uniform: width_s; pareto: scale_s, alpha */
    double reorder;     /* probability that a packet is held reorder_gap_s longer */
    double reorder_gap_s;
    double duplicate;   /* probability of a copy */
    double rate_Bps;    /* path bandwidth in bytes/s, 0 = none */
    double limit_bytes; /* queue size, 0 = not in bytes */
    int32_t limit_packets; /* queue size, 0 = not in packets */
    double ecn_bytes;   /* mark CE above this backlog, 0 = never */
} params_t;

typedef struct {
    uint64_t key; /* src * n + dst + 1; 0 = empty slot */
    uint64_t fwd, bytes, dropped;
} counter_t;

typedef struct {
    uint64_t key;
    double busy_until;
    double *ring; /* departure times of queued packets (packet limit) */
    int32_t cap, head, count;
} queue_t;

typedef struct {
    uint64_t key;
    int32_t index; /* into params */
} override_t;

typedef struct {
    double due;
    uint64_t seq;
    uint32_t id, size, mark;
    int32_t src, dst;
} held_t;

typedef struct {
    double data[WINDOW];
    uint64_t count;
} window_t;

typedef struct fp {
    pthread_mutex_t lock;
    int nfq_fd, wake_fd;
    uint16_t queue;
    int32_t n;
    uint32_t ip_first;
    double path_offset_s;
    volatile int stop;
    /* the model */
    double **rows;
    int32_t *group;
    uint8_t *down;
    int extras; /* anything besides delay */
    params_t dflt;
    params_t *params;
    override_t *ovr;
    uint64_t ovr_cap;
    /* state */
    held_t *heap;
    uint64_t heap_len, heap_cap, seq, max_held;
    counter_t *ctr;
    uint64_t ctr_cap, ctr_len;
    queue_t *q;
    uint64_t q_cap, q_len;
    uint64_t packets_in, foreign, no_timestamp, drops[N_REASONS];
    uint64_t duplicated, ce_marked, reordered, send_errors;
    double last_error_s;
    int have_last_error;
    window_t late, immediate;
    uint64_t rng[4];
    double early_s, lead_s;
    double spin_used_s, spin_period_start, spun_s;
    /* verdict buffer */
    uint8_t *out;
    size_t out_len, out_cap;
} fp_t;

/* -- randomness: xoshiro256**, seeded by splitmix64 -------------------------------------------- */

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(fp_t *fp) {
    uint64_t *s = fp->rng;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return result;
}

static inline double uniform01(fp_t *fp) { return (next_u64(fp) >> 11) * 0x1.0p-53; }

static double jitter_s(fp_t *fp, const params_t *p) {
    switch (p->jitter) {
    case J_NORMAL: {
        double u1 = 1.0 - uniform01(fp), u2 = uniform01(fp);
        return p->j1 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    }
    case J_UNIFORM:
        return p->j1 * (2.0 * uniform01(fp) - 1.0);
    case J_PARETO:
        return p->j1 * (pow(1.0 - uniform01(fp), -1.0 / p->j2) - 1.0);
    default:
        return 0.0;
    }
}

/* -- hash tables (open addressing, linear probing, power-of-two sizes) --------------------------- */

static inline uint64_t hash(uint64_t key) {
    key ^= key >> 33; key *= 0xff51afd7ed558ccdULL; key ^= key >> 33;
    return key;
}

static counter_t *counter(fp_t *fp, uint64_t key) {
    if ((fp->ctr_len + 1) * 2 > fp->ctr_cap) {
        uint64_t cap = fp->ctr_cap ? fp->ctr_cap * 2 : 1024;
        counter_t *table = calloc(cap, sizeof *table);
        if (!table) return NULL;
        for (uint64_t i = 0; i < fp->ctr_cap; i++) {
            if (!fp->ctr[i].key) continue;
            uint64_t j = hash(fp->ctr[i].key) & (cap - 1);
            while (table[j].key) j = (j + 1) & (cap - 1);
            table[j] = fp->ctr[i];
        }
        free(fp->ctr);
        fp->ctr = table;
        fp->ctr_cap = cap;
    }
    uint64_t j = hash(key) & (fp->ctr_cap - 1);
    while (fp->ctr[j].key && fp->ctr[j].key != key) j = (j + 1) & (fp->ctr_cap - 1);
    if (!fp->ctr[j].key) {
        fp->ctr[j].key = key;
        fp->ctr_len++;
    }
    return &fp->ctr[j];
}

static queue_t *pair_queue(fp_t *fp, uint64_t key) {
    if ((fp->q_len + 1) * 2 > fp->q_cap) {
        uint64_t cap = fp->q_cap ? fp->q_cap * 2 : 256;
        queue_t *table = calloc(cap, sizeof *table);
        if (!table) return NULL;
        for (uint64_t i = 0; i < fp->q_cap; i++) {
            if (!fp->q[i].key) continue;
            uint64_t j = hash(fp->q[i].key) & (cap - 1);
            while (table[j].key) j = (j + 1) & (cap - 1);
            table[j] = fp->q[i];
        }
        free(fp->q);
        fp->q = table;
        fp->q_cap = cap;
    }
    uint64_t j = hash(key) & (fp->q_cap - 1);
    while (fp->q[j].key && fp->q[j].key != key) j = (j + 1) & (fp->q_cap - 1);
    if (!fp->q[j].key) {
        fp->q[j].key = key;
        fp->q_len++;
    }
    return &fp->q[j];
}

static const params_t *pair_params(const fp_t *fp, uint64_t key) {
    if (fp->ovr_cap) {
        uint64_t j = hash(key) & (fp->ovr_cap - 1);
        while (fp->ovr[j].key) {
            if (fp->ovr[j].key == key) return &fp->params[fp->ovr[j].index];
            j = (j + 1) & (fp->ovr_cap - 1);
        }
    }
    return &fp->dflt;
}

/* -- windows ------------------------------------------------------------------------------------- */

static inline void window_add(window_t *w, double v) { w->data[w->count++ % WINDOW] = v; }

/* -- the heap of held packets -------------------------------------------------------------------- */

static inline int before(const held_t *a, const held_t *b) {
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static int heap_push(fp_t *fp, held_t item) {
    if (fp->heap_len == fp->heap_cap) {
        uint64_t cap = fp->heap_cap ? fp->heap_cap * 2 : 4096;
        held_t *heap = realloc(fp->heap, cap * sizeof *heap);
        if (!heap) return -1;
        fp->heap = heap;
        fp->heap_cap = cap;
    }
    uint64_t i = fp->heap_len++;
    while (i > 0) {
        uint64_t parent = (i - 1) / 2;
        if (!before(&item, &fp->heap[parent])) break;
        fp->heap[i] = fp->heap[parent];
        i = parent;
    }
    fp->heap[i] = item;
    if (fp->heap_len > fp->max_held) fp->max_held = fp->heap_len;
    return 0;
}

static held_t heap_pop(fp_t *fp) {
    held_t top = fp->heap[0], last = fp->heap[--fp->heap_len];
    uint64_t i = 0, n = fp->heap_len;
    for (;;) {
        uint64_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && before(&fp->heap[child + 1], &fp->heap[child])) child++;
        if (!before(&fp->heap[child], &last)) break;
        fp->heap[i] = fp->heap[child];
        i = child;
    }
    if (n) fp->heap[i] = last;
    return top;
}

/* -- verdicts ------------------------------------------------------------------------------------ */

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static int out_reserve(fp_t *fp, size_t more) {
    if (fp->out_len + more <= fp->out_cap) return 0;
    size_t cap = fp->out_cap ? fp->out_cap * 2 : 65536;
    while (cap < fp->out_len + more) cap *= 2;
    uint8_t *out = realloc(fp->out, cap);
    if (!out) return -1;
    fp->out = out;
    fp->out_cap = cap;
    return 0;
}

static void add_verdict(fp_t *fp, uint32_t id, int verdict, uint32_t mark) {
    size_t len = mark ? VERDICT_BYTES : 32;
    if (out_reserve(fp, len)) return;
    uint8_t *p = fp->out + fp->out_len;
    memset(p, 0, len);
    uint32_t nl_len = (uint32_t)len;
    uint16_t type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT, flags = NLM_F_REQUEST;
    memcpy(p, &nl_len, 4);
    memcpy(p + 4, &type, 2);
    memcpy(p + 6, &flags, 2);
    /* seq, pid: 0 */
    p[16] = 0; /* AF_UNSPEC */
    p[17] = 0; /* version */
    p[18] = fp->queue >> 8; /* res_id, big-endian */
    p[19] = fp->queue & 0xff;
    uint16_t alen = 12, atype = NFQA_VERDICT_HDR;
    memcpy(p + 20, &alen, 2);
    memcpy(p + 22, &atype, 2);
    put_be32(p + 24, (uint32_t)verdict);
    put_be32(p + 28, id);
    if (mark) {
        uint16_t mlen = 8, mtype = NFQA_MARK;
        memcpy(p + 32, &mlen, 2);
        memcpy(p + 34, &mtype, 2);
        put_be32(p + 36, mark);
    }
    fp->out_len += len;
}

static void flush(fp_t *fp) {
    /* Netlink takes many messages in one send; each send stays under 32 KB and whole. */
    size_t off = 0;
    while (off < fp->out_len) {
        size_t take = 0;
        while (off + take < fp->out_len) {
            uint32_t mlen;
            memcpy(&mlen, fp->out + off + take, 4);
            if (take && take + mlen > 32768) break;
            take += mlen;
        }
        ssize_t sent;
        do {
            sent = send(fp->nfq_fd, fp->out + off, take, 0);
        } while (sent < 0 && (errno == EINTR || errno == EAGAIN));
        if (sent < 0) fp->send_errors++;
        off += take;
    }
    fp->out_len = 0;
}

/* -- fate ---------------------------------------------------------------------------------------- */

static inline int blocked(const fp_t *fp, int32_t src, int32_t dst) {
    if (!fp->extras) return -1;
    if (fp->down[src] || fp->down[dst]) return R_DOWN;
    if (fp->group[src] != fp->group[dst]) return R_PARTITION;
    return -1;
}

static void count_forward(fp_t *fp, uint64_t key, uint32_t size) {
    counter_t *c = counter(fp, key);
    if (c) { c->fwd++; c->bytes += size; }
}

static void count_drop(fp_t *fp, uint64_t key, int reason) {
    counter_t *c = counter(fp, key);
    if (c) c->dropped++;
    fp->drops[reason]++;
}

/* Returns NF_ACCEPT or NF_DROP when answered at once, -1 when held. */
int fp_packet_in(fp_t *fp, uint32_t id, double stamp, uint32_t saddr, uint32_t daddr,
                 uint32_t size, uint32_t tos, double now, uint32_t *mark_out) {
    *mark_out = 0;
    fp->packets_in++;
    int64_t src = (int64_t)saddr - fp->ip_first, dst = (int64_t)daddr - fp->ip_first;
    if (src < 0 || dst < 0 || src >= fp->n || dst >= fp->n || src == dst) {
        fp->foreign++;
        return NF_ACCEPT;
    }
    if (stamp == 0.0) {
        fp->no_timestamp++;
        stamp = now;
    }
    uint64_t key = (uint64_t)src * fp->n + dst + 1;
    double delay = fp->rows[src][dst];
    double departure = stamp;
    uint32_t mark = 0;
    if (fp->extras) {
        int reason = blocked(fp, src, dst);
        if (reason >= 0) {
            count_drop(fp, key, reason);
            return NF_DROP;
        }
        const params_t *p = pair_params(fp, key);
        if (p->loss > 0.0 && uniform01(fp) < p->loss) {
            count_drop(fp, key, R_LOSS);
            return NF_DROP;
        }
        if (p->rate_Bps > 0.0) {
            queue_t *q = pair_queue(fp, key);
            if (q) {
                double backlog = q->busy_until > stamp ? (q->busy_until - stamp) * p->rate_Bps : 0.0;
                if (p->limit_packets > 0) {
                    if (q->cap != p->limit_packets) {
                        free(q->ring);
                        q->ring = calloc((size_t)p->limit_packets, sizeof(double));
                        q->cap = q->ring ? p->limit_packets : 0;
                        q->head = q->count = 0;
                    }
                    while (q->count && q->ring[q->head] <= stamp) {
                        q->head = (q->head + 1) % q->cap;
                        q->count--;
                    }
                }
                if ((p->limit_bytes > 0.0 && backlog + size > p->limit_bytes) ||
                    (p->limit_packets > 0 && q->count >= q->cap)) {
                    count_drop(fp, key, R_QUEUE);
                    return NF_DROP;
                }
                if (p->ecn_bytes > 0.0 && backlog > p->ecn_bytes && (tos & 3)) {
                    mark |= MARK_CE;
                    fp->ce_marked++;
                }
                double start = q->busy_until > stamp ? q->busy_until : stamp;
                q->busy_until = start + size / p->rate_Bps;
                departure = q->busy_until;
                if (p->limit_packets > 0 && q->cap) {
                    q->ring[(q->head + q->count) % q->cap] = departure;
                    q->count++;
                }
            }
        }
        if (p->jitter != J_NONE) {
            delay += jitter_s(fp, p);
            if (delay < 0.0) delay = 0.0;
        }
        if (p->reorder > 0.0 && uniform01(fp) < p->reorder) {
            delay += p->reorder_gap_s;
            fp->reordered++;
        }
        if (p->duplicate > 0.0 && uniform01(fp) < p->duplicate) {
            mark |= MARK_DUP;
            fp->duplicated++;
        }
    }
    double due = departure + delay - fp->path_offset_s;
    if (due <= now) {
        count_forward(fp, key, size);
        window_add(&fp->immediate, now - stamp);
        *mark_out = mark;
        return NF_ACCEPT;
    }
    held_t item = {due, fp->seq++, id, size, mark, (int32_t)src, (int32_t)dst};
    if (heap_push(fp, item)) {
        count_drop(fp, key, R_QUEUE);
        return NF_DROP;
    }
    return -1;
}

/* Pops every packet due by `until`; verdicts go to ids/verdicts/marks (up to max, the rest
 * stays held). Returns the count. */
int fp_release(fp_t *fp, double until, double now, uint32_t *ids, int32_t *verdicts,
               uint32_t *marks, int max) {
    int k = 0;
    double error_sum = 0.0;
    while (fp->heap_len && fp->heap[0].due <= until && k < max) {
        held_t h = heap_pop(fp);
        uint64_t key = (uint64_t)h.src * fp->n + h.dst + 1;
        int reason = blocked(fp, h.src, h.dst);
        ids[k] = h.id;
        marks[k] = 0;
        if (reason >= 0) {
            count_drop(fp, key, reason);
            verdicts[k] = NF_DROP;
        } else {
            count_forward(fp, key, h.size);
            window_add(&fp->late, now - h.due);
            verdicts[k] = NF_ACCEPT;
            marks[k] = h.mark;
        }
        error_sum += now - h.due;
        k++;
    }
    fp->have_last_error = k > 0;
    fp->last_error_s = k ? error_sum / k : 0.0;
    return k;
}

/* -- set-up and model ---------------------------------------------------------------------------- */

fp_t *fp_new(int nfq_fd, int queue, int n, uint32_t ip_first, uint64_t seed) {
    fp_t *fp = calloc(1, sizeof *fp);
    if (!fp) return NULL;
    pthread_mutex_init(&fp->lock, NULL);
    fp->nfq_fd = nfq_fd;
    fp->queue = (uint16_t)queue;
    fp->n = n;
    fp->ip_first = ip_first;
    fp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    fp->group = calloc((size_t)n, sizeof(int32_t));
    fp->down = calloc((size_t)n, 1);
    fp->rows = calloc((size_t)n, sizeof(double *));
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) fp->rng[i] = splitmix(&x);
    if (fp->wake_fd < 0 || !fp->group || !fp->down || !fp->rows) {
        free(fp->group); free(fp->down); free(fp->rows);
        if (fp->wake_fd >= 0) close(fp->wake_fd);
        free(fp);
        return NULL;
    }
    return fp;
}

void fp_free(fp_t *fp) {
    if (!fp) return;
    for (uint64_t i = 0; i < fp->q_cap; i++) free(fp->q[i].ring);
    free(fp->q); free(fp->ctr); free(fp->heap); free(fp->out);
    free(fp->params); free(fp->ovr);
    free(fp->group); free(fp->down); free(fp->rows);
    close(fp->wake_fd);
    pthread_mutex_destroy(&fp->lock);
    free(fp);
}

void fp_lock(fp_t *fp) { pthread_mutex_lock(&fp->lock); }
void fp_unlock(fp_t *fp) { pthread_mutex_unlock(&fp->lock); }

/* The caller holds the lock (fp_lock) for the set_* calls. */
void fp_set_rows(fp_t *fp, double **rows) { memcpy(fp->rows, rows, (size_t)fp->n * sizeof *rows); }

void fp_set_hosts(fp_t *fp, const int32_t *group, const uint8_t *down, int extras) {
    memcpy(fp->group, group, (size_t)fp->n * sizeof(int32_t));
    memcpy(fp->down, down, (size_t)fp->n);
    fp->extras = extras;
}

/* params[0] is the default; params[1..count] belong to keys[0..count-1] (src * n + dst). */
int fp_set_params(fp_t *fp, const params_t *params, const uint64_t *keys, int64_t count) {
    uint64_t cap = 0;
    override_t *ovr = NULL;
    params_t *copy = malloc((size_t)(count + 1) * sizeof *copy);
    if (!copy) return -1;
    memcpy(copy, params, (size_t)(count + 1) * sizeof *copy);
    if (count) {
        cap = 16;
        while (cap < (uint64_t)count * 2) cap *= 2;
        ovr = calloc(cap, sizeof *ovr);
        if (!ovr) { free(copy); return -1; }
        for (int64_t i = 0; i < count; i++) {
            uint64_t key = keys[i] + 1, j = hash(key) & (cap - 1);
            while (ovr[j].key && ovr[j].key != key) j = (j + 1) & (cap - 1);
            ovr[j].key = key;
            ovr[j].index = (int32_t)(i + 1);
        }
    }
    free(fp->params);
    free(fp->ovr);
    fp->params = copy;
    fp->dflt = copy[0];
    fp->ovr = ovr;
    fp->ovr_cap = cap;
    return 0;
}

void fp_set_path_offset(fp_t *fp, double s) { fp->path_offset_s = s; }

void fp_set_fd(fp_t *fp, int nfq_fd) { fp->nfq_fd = nfq_fd; }

/* -- figures ------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t packets_in, foreign, no_timestamp, held, max_held, forwarded;
    uint64_t drops[N_REASONS];
    uint64_t duplicated, ce_marked, reordered, send_errors;
    double early_s, lead_s, path_offset_s, last_error_s;
    int64_t have_last_error;
    double spun_s;
} fp_stats_t;

void fp_stats(fp_t *fp, fp_stats_t *s) {
    memset(s, 0, sizeof *s);
    s->packets_in = fp->packets_in;
    s->foreign = fp->foreign;
    s->no_timestamp = fp->no_timestamp;
    s->held = fp->heap_len;
    s->max_held = fp->max_held;
    for (uint64_t i = 0; i < fp->ctr_cap; i++) s->forwarded += fp->ctr[i].fwd;
    memcpy(s->drops, fp->drops, sizeof s->drops);
    s->duplicated = fp->duplicated;
    s->ce_marked = fp->ce_marked;
    s->reordered = fp->reordered;
    s->send_errors = fp->send_errors;
    s->early_s = fp->early_s;
    s->lead_s = fp->lead_s;
    s->path_offset_s = fp->path_offset_s;
    s->last_error_s = fp->last_error_s;
    s->have_last_error = fp->have_last_error;
    s->spun_s = fp->spun_s;
}

/* Rows of (src, dst, forwarded, bytes, dropped); returns the count, or -(needed) if max is short. */
int64_t fp_counters(fp_t *fp, uint64_t *out, int64_t max, int reset) {
    if ((int64_t)fp->ctr_len > max) return -(int64_t)fp->ctr_len;
    int64_t k = 0;
    for (uint64_t i = 0; i < fp->ctr_cap; i++) {
        counter_t *c = &fp->ctr[i];
        if (!c->key) continue;
        uint64_t key = c->key - 1;
        out[5 * k] = key / (uint64_t)fp->n;
        out[5 * k + 1] = key % (uint64_t)fp->n;
        out[5 * k + 2] = c->fwd;
        out[5 * k + 3] = c->bytes;
        out[5 * k + 4] = c->dropped;
        k++;
    }
    if (reset) {
        free(fp->ctr);
        fp->ctr = NULL;
        fp->ctr_cap = fp->ctr_len = 0;
        memset(fp->drops, 0, sizeof fp->drops);
    }
    return k;
}

/* which: 0 = release lateness of held packets, 1 = processing delay of immediate ones. */
int fp_window(fp_t *fp, int which, double *out) {
    window_t *w = which ? &fp->immediate : &fp->late;
    uint64_t count = w->count < WINDOW ? w->count : WINDOW;
    memcpy(out, w->data, count * sizeof(double));
    return (int)count;
}

/* Every held packet dropped (shutdown or a test); returns how many. */
int64_t fp_drain(fp_t *fp, uint32_t *ids, int64_t max) {
    int64_t k = 0;
    while (fp->heap_len) {
        held_t h = heap_pop(fp);
        if (ids && k < max) ids[k] = h.id;
        if (fp->nfq_fd >= 0) add_verdict(fp, h.id, NF_DROP, 0);
        k++;
    }
    if (fp->nfq_fd >= 0) flush(fp);
    return k;
}

double fp_next_due(fp_t *fp) { return fp->heap_len ? fp->heap[0].due : -1.0; }

/* -- the loop ------------------------------------------------------------------------------------ */

static inline double realtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Parses one NFQNL_MSG_PACKET (as parse_packet_untrusted); returns 0 when it is not one. */
static int parse(const uint8_t *buf, size_t length, uint32_t *id, double *stamp, uint32_t *saddr,
                 uint32_t *daddr, uint32_t *size, uint32_t *tos) {
    if (length < 20) return 0;
    uint32_t msg_len;
    uint16_t msg_type;
    memcpy(&msg_len, buf, 4);
    memcpy(&msg_type, buf + 4, 2);
    if (msg_type != ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET) || msg_len > length) return 0;
    size_t off = 20;
    int64_t pid = -1;
    uint32_t cap_len = 0, total = 0;
    *stamp = 0.0;
    *saddr = *daddr = 0;
    while (off + 4 <= msg_len) {
        uint16_t alen, atype;
        memcpy(&alen, buf + off, 2);
        memcpy(&atype, buf + off + 2, 2);
        if (alen < 4 || off + alen > msg_len) return 0;
        atype &= NLA_TYPE_MASK;
        const uint8_t *v = buf + off + 4;
        if (atype == NFQA_PACKET_HDR && alen >= 8) {
            pid = ((uint32_t)v[0] << 24) | (v[1] << 16) | (v[2] << 8) | v[3];
        } else if (atype == NFQA_TIMESTAMP && alen >= 20) {
            uint64_t sec = 0, usec = 0;
            for (int i = 0; i < 8; i++) sec = (sec << 8) | v[i];
            for (int i = 8; i < 16; i++) usec = (usec << 8) | v[i];
            *stamp = sec + usec * 1e-6;
        } else if (atype == NFQA_PAYLOAD && alen >= 24) {
            if (v[0] >> 4 != 4) return 0;
            *tos = v[1];
            total = (v[2] << 8) | v[3];
            *saddr = ((uint32_t)v[12] << 24) | (v[13] << 16) | (v[14] << 8) | v[15];
            *daddr = ((uint32_t)v[16] << 24) | (v[17] << 16) | (v[18] << 8) | v[19];
        } else if (atype == NFQA_CAP_LEN && alen >= 8) {
            cap_len = ((uint32_t)v[0] << 24) | (v[1] << 16) | (v[2] << 8) | v[3];
        }
        off += (alen + 3u) & ~3u;
    }
    if (pid < 0 || *saddr == 0) return 0;
    *id = (uint32_t)pid;
    *size = cap_len ? cap_len : total;
    return 1;
}

#define EARLY_GAIN 0.05
#define EARLY_MAX_S 0.001
#define RELEASE_SLACK_S 0.000005
#define LEAD_GAIN 0.02
#define LEAD_MAX_S 0.0003
/* A sleeping thread wakes up late by tens of microseconds on this kind of machine (more
 * now and then), so it sleeps until SPIN_WINDOW_S before a due time and then watches the
 * clock for the rest. Spinning at real-time priority starves the kernel's softirq thread
 * when packets are dense (tried: RT throttling then stalled everything for 50 ms), so a
 * thread spins only before a sleep longer than SPIN_MIN_SLEEP_S (it is lightly loaded)
 * and at most SPIN_BUDGET of its time, measured over SPIN_PERIOD_S. */
#define SPIN_WINDOW_S 0.000050
#define SPIN_BUDGET 0.10
#define SPIN_PERIOD_S 0.010
#define SPIN_MIN_SLEEP_S 0.000200

/* Releases everything due, sending the verdicts RELEASE_BATCH at a time: the kernel forwards
 * each released packet inside our send, and smaller sends let the first go sooner. */
#define RELEASE_BATCH 32
static void release(fp_t *fp) {
    uint32_t ids[RELEASE_BATCH], marks[RELEASE_BATCH];
    int32_t verdicts[RELEASE_BATCH];
    for (;;) {
        double now = realtime();
        int k = fp_release(fp, now + RELEASE_SLACK_S + fp->lead_s, now, ids, verdicts, marks,
                           RELEASE_BATCH);
        for (int i = 0; i < k; i++) add_verdict(fp, ids[i], verdicts[i], marks[i]);
        if (k && fp->have_last_error) {
            double lead = fp->lead_s + LEAD_GAIN * fp->last_error_s;
            fp->lead_s = lead < 0.0 ? 0.0 : lead > LEAD_MAX_S ? LEAD_MAX_S : lead;
        }
        flush(fp);
        if (k < RELEASE_BATCH) break;
    }
}

/* Runs until fp_stop(); returns 0, or an errno when reading the queue failed for good. */
int fp_run(fp_t *fp) {
    static __thread uint8_t bufs[READ_BATCH][BUF_BYTES];
    struct mmsghdr msgs[READ_BATCH];
    struct iovec iov[READ_BATCH];
    struct pollfd fds[2] = {{fp->nfq_fd, POLLIN, 0}, {fp->wake_fd, POLLIN, 0}};
    int error = 0;
    pthread_mutex_lock(&fp->lock);
    while (!fp->stop) {
        release(fp);
        double due = fp->heap_len ? fp->heap[0].due : -1.0;
        double now = realtime();
        int timeout_given = 0;
        struct timespec ts = {0, 0};
        double wait = 0.5; /* wake now and then even when idle: stop is also an event */
        if (now - fp->spin_period_start > SPIN_PERIOD_S) {
            fp->spin_period_start = now;
            fp->spin_used_s = 0.0;
        }
        /* Only before a long sleep (the thread is lightly loaded): when due times are dense
         * the thread rarely sleeps long, and its time is better spent reading. */
        int spin = due >= 0.0 && due - fp->lead_s - fp->early_s - now > SPIN_MIN_SLEEP_S &&
                   fp->spin_used_s < SPIN_BUDGET * SPIN_PERIOD_S;
        if (due >= 0.0) {
            wait = due - fp->lead_s - fp->early_s - (spin ? SPIN_WINDOW_S : 0.0) - now;
            if (wait < 0.0) wait = 0.0;
        }
        ts.tv_sec = (time_t)wait;
        ts.tv_nsec = (long)((wait - (double)ts.tv_sec) * 1e9);
        timeout_given = wait > 0.0;
        pthread_mutex_unlock(&fp->lock);
        int ready = ppoll(fds, 2, &ts, NULL);
        pthread_mutex_lock(&fp->lock);
        if (ready < 0 && errno != EINTR) {
            error = errno;
            break;
        }
        if (ready == 0) {
            double woke = realtime();
            if (timeout_given && due >= 0.0) {
                double oversleep = woke - (now + wait);
                double early = fp->early_s + EARLY_GAIN * (oversleep - fp->early_s);
                fp->early_s = early < 0.0 ? 0.0 : early > EARLY_MAX_S ? EARLY_MAX_S : early;
            }
            if (spin) {
                /* the rest of the way by the clock (a new packet waits for the next pass) */
                double until = due - fp->lead_s, t = woke;
                while (t < until && t - woke < SPIN_WINDOW_S + EARLY_MAX_S) t = realtime();
                fp->spin_used_s += t - woke;
                fp->spun_s += t - woke;
            }
            continue;
        }
        if (fds[1].revents & POLLIN) {
            uint64_t value;
            ssize_t got = read(fp->wake_fd, &value, sizeof value);
            (void)got;
        }
        if (fds[0].revents & POLLIN) {
            for (int i = 0; i < READ_BATCH; i++) {
                iov[i].iov_base = bufs[i];
                iov[i].iov_len = BUF_BYTES;
                memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
                msgs[i].msg_hdr.msg_iov = &iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            int got = recvmmsg(fp->nfq_fd, msgs, READ_BATCH, MSG_DONTWAIT, NULL);
            if (got < 0 && errno != EAGAIN && errno != EINTR && errno != ENOBUFS) {
                error = errno;
                break;
            }
            double now_in = realtime();
            for (int i = 0; i < got; i++) {
                uint32_t id, saddr, daddr, size, tos = 0, mark;
                double stamp;
                if (!parse(bufs[i], msgs[i].msg_len, &id, &stamp, &saddr, &daddr, &size, &tos))
                    continue;
                int verdict = fp_packet_in(fp, id, stamp, saddr, daddr, size, tos, now_in, &mark);
                if (verdict >= 0) add_verdict(fp, id, verdict, mark);
            }
            flush(fp);
        }
    }
    fp_drain(fp, NULL, 0);
    pthread_mutex_unlock(&fp->lock);
    return error;
}

void fp_stop(fp_t *fp) {
    fp->stop = 1;
    uint64_t one = 1;
    ssize_t put = write(fp->wake_fd, &one, sizeof one);
    (void)put;
}
