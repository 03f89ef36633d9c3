/* The ICMP prober's send and receive loop in C (built by `make` into
 * _pinger.so): the same probes, pacing and timing as IcmpProber.probe in
 * _probe.py, which opens the raw sockets (one per host namespace) and falls
 * back to its Python loop without this library. Python's loop tops out near
 * 10,000 probes/s; the delay engine's benchmarks need five times that.
 *
 * A probe is an ICMP echo request (ident = source host, seq = probe number's
 * low 16 bits, payload = session, probe number: both big-endian). Departure is
 * read just before sendto(), arrival is the kernel's SO_TIMESTAMPNS stamp.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RECV_BATCH 32

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint16_t checksum(const uint8_t *data, size_t len) {
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2) sum += (data[i] << 8) | data[i + 1];
    if (len & 1) sum += data[len - 1] << 8;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }
static uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
}

/* Sends `total` probes (probe k from host srcs[k] to host dsts[k], numbered base + k) paced at
 * `rate` per second, and collects replies until all came or `timeout_s` after the last send.
 * rtt[k] gets the RTT in seconds, or -1 when lost. times[0] = wall time of the first send,
 * times[1] = kernel time of the last reply. Returns the replies received (or -errno);
 * *foreign counts replies that were not awaited (duplicates, late, other sessions);
 * *progress follows the probes sent, for a caller's progress display. */
int64_t pg_probe(int nsocks, const int *fds, const uint32_t *ips, int64_t total, const int32_t *srcs,
                 const int32_t *dsts, uint32_t base, double rate, double timeout_s,
                 uint32_t session, double *sent_at, double *rtt, double *times, int64_t *foreign,
                 volatile int64_t *progress, int priority) {
    /* A load generator that the delay engine's real-time threads starve measures its own
     * lateness: with priority > 0 it runs SCHED_FIFO too (below the engine's 20). */
    if (priority > 0) {
        struct sched_param param = {.sched_priority = priority};
        sched_setscheduler(0, SCHED_FIFO, &param);
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return -errno;
    for (int i = 0; i < nsocks; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
            int e = errno;
            close(ep);
            return -e;
        }
    }
    for (int64_t k = 0; k < total; k++) { rtt[k] = -1.0; sent_at[k] = 0.0; }
    int64_t sent = 0, received = 0;
    double interval = 1.0 / rate, start_wall = clock_s(CLOCK_REALTIME);
    double next_send = clock_s(CLOCK_MONOTONIC), deadline = -1.0, last_reply = start_wall;
    uint8_t packet[16];
    static __thread uint8_t bufs[RECV_BATCH][256];
    static __thread char controls[RECV_BATCH][128];
    struct mmsghdr msgs[RECV_BATCH];
    struct iovec iovs[RECV_BATCH];
    struct epoll_event events[64];
    for (;;) {
        double now = clock_s(CLOCK_MONOTONIC);
        while (sent < total && next_send <= now) {
            int32_t src = srcs[sent], dst = dsts[sent];
            uint32_t probe = base + (uint32_t)sent;
            memset(packet, 0, sizeof packet);
            packet[0] = 8; /* echo request */
            put16(packet + 4, (uint16_t)(src & 0xffff));
            put16(packet + 6, (uint16_t)(probe & 0xffff));
            put32(packet + 8, session);
            put32(packet + 12, probe);
            put16(packet + 2, checksum(packet, sizeof packet));
            struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = ips[dst]};
            sent_at[sent] = clock_s(CLOCK_REALTIME);
            if (sendto(fds[src], packet, sizeof packet, 0, (struct sockaddr *)&to, sizeof to) < 0)
                sent_at[sent] = 0.0;
            sent++;
            *progress = sent;
            next_send += interval;
        }
        if (sent == total && deadline < 0.0) deadline = clock_s(CLOCK_MONOTONIC) + timeout_s;
        if (deadline >= 0.0 && (received == total || clock_s(CLOCK_MONOTONIC) >= deadline)) break;
        double wait = sent < total ? next_send - clock_s(CLOCK_MONOTONIC) : 0.05;
        if (wait < 0.0) wait = 0.0;
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        int ready = epoll_pwait2(ep, events, 64, &ts, NULL);
        if (ready < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(ep);
            return -e;
        }
        for (int e = 0; e < ready; e++) {
            int fd = fds[events[e].data.u32];
            for (;;) {
                /* A batch per system call: at 50,000 replies/s one recvmsg each costs a core's tenth. */
                for (int i = 0; i < RECV_BATCH; i++) {
                    iovs[i].iov_base = bufs[i];
                    iovs[i].iov_len = sizeof bufs[i];
                    memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
                    msgs[i].msg_hdr.msg_iov = &iovs[i];
                    msgs[i].msg_hdr.msg_iovlen = 1;
                    msgs[i].msg_hdr.msg_control = controls[i];
                    msgs[i].msg_hdr.msg_controllen = sizeof controls[i];
                }
                int got = recvmmsg(fd, msgs, RECV_BATCH, MSG_DONTWAIT, NULL);
                if (got <= 0) break;
                for (int i = 0; i < got; i++) {
                    struct msghdr *msg = &msgs[i].msg_hdr;
                    const uint8_t *buf = bufs[i];
                    size_t len = msgs[i].msg_len;
                    double arrived = -1.0;
                    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                            struct timespec t;
                            memcpy(&t, CMSG_DATA(c), sizeof t);
                            arrived = t.tv_sec + t.tv_nsec * 1e-9;
                        }
                    }
                    if (arrived < 0.0) arrived = clock_s(CLOCK_REALTIME);
                    if (len < 20) { (*foreign)++; continue; }
                    size_t hl = (size_t)(buf[0] & 0x0f) * 4;
                    if (len < hl + 16 || buf[hl] != 0 || get32(buf + hl + 8) != session) {
                        (*foreign)++;
                        continue;
                    }
                    int64_t k = (int64_t)(uint32_t)(get32(buf + hl + 12) - base);
                    if (k < 0 || k >= sent || sent_at[k] <= 0.0) {
                        (*foreign)++; /* a duplicate, or a reply to an earlier batch */
                        continue;
                    }
                    rtt[k] = arrived - sent_at[k];
                    sent_at[k] = 0.0;
                    received++;
                    if (arrived > last_reply) last_reply = arrived;
                }
                if (got < RECV_BATCH) break;
            }
        }
    }
    close(ep);
    times[0] = start_wall;
    times[1] = last_reply;
    return received;
}
