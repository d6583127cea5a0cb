/* PID 1 of an instance once it is set up: a native reaper that holds no Python.
 *
 * Why: a Python PID 1 cost every idle instance about 1.3 MB of private memory (the
 * pages its fork chain dirtied that the agent then wrote again) and its share of the
 * zygote's. This process costs about 0.1 MB. See `launcher.py` and `zygote.py`.
 *
 * It reaps every orphan; ends everything on SIGTERM (SIGTERM to all, then exits after
 * a grace period or when no process is left, and the kernel kills what remains); and,
 * when the agent (pid in $AGENT_PID: the command line, which the tenant reads, stays
 * `corral-init`) dies, rings the zygote to start a new one: it
 * connects to `respawn.sock` in the host directory held open on fd 4 and reads back
 * the new agent's pid. The zygote reads what the agent needs from the sealed memfd on
 * fd 3 (pidfd_getfd). Neither fd is reachable by the tenant: this process is not
 * dumpable, and the tenant lacks CAP_SYS_PTRACE. Closing fd 5 tells the first agent
 * that this program is in place (it reports ready only then).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GATE_FD 5
#define GRACE_MS 3000
#define REPLY_MS 15000
#define RETRY_MIN_MS 500
#define RETRY_MAX_MS 30000

static long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void shutdown_all(void) {
    kill(-1, SIGTERM);
    long long deadline = now_ms() + GRACE_MS;
    while (now_ms() < deadline) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);
        if (pid < 0 && errno == ECHILD) break;
        if (pid <= 0) {
            struct timespec t = {0, 20 * 1000000};
            nanosleep(&t, NULL);
        }
    }
    _exit(0);
}

/* Ask the zygote for a new agent: its pid in this namespace, or 0. */
static pid_t ring(int sfd) {
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0) return 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, "/proc/self/fd/4/respawn.sock");
    pid_t pid = 0;
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0 && send(sock, "respawn", 7, 0) == 7) {
        long long deadline = now_ms() + REPLY_MS;
        for (;;) {
            long long left = deadline - now_ms();
            if (left <= 0) break;
            struct pollfd fds[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
            if (poll(fds, 2, (int)left) < 0 && errno != EINTR) break;
            if (fds[1].revents & POLLIN) {
                struct signalfd_siginfo info;
                if (read(sfd, &info, sizeof info) == sizeof info) {
                    if (info.ssi_signo == SIGTERM) shutdown_all();
                    while (waitpid(-1, NULL, WNOHANG) > 0) {}
                }
            }
            if (fds[0].revents) {
                char buffer[32] = {0};
                ssize_t n = recv(sock, buffer, sizeof buffer - 1, 0);
                if (n > 0) pid = (pid_t)atoi(buffer);
                break;
            }
        }
    }
    close(sock);
    return pid;
}

int main(void) {
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    prctl(PR_SET_NAME, "corral-init", 0, 0, 0);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) return 1;
    close(GATE_FD); /* the agent may now say it is ready: PID 1 is in place */
    const char *first = getenv("AGENT_PID");
    pid_t agent = first ? (pid_t)atoi(first) : 0;
    int need_agent = agent <= 0;
    long long retry_at = 0, retry_ms = RETRY_MIN_MS;
    int check = 1; /* a child may have died before the exec into this program */
    for (;;) {
        pid_t pid;
        while (check && (pid = waitpid(-1, NULL, WNOHANG)) > 0) {
            if (pid == agent) {
                agent = 0;
                need_agent = 1;
                retry_at = now_ms() + 200; /* as the Python init did: not in a tight loop */
            }
        }
        check = 0;
        int timeout = -1;
        if (need_agent) {
            long long left = retry_at - now_ms();
            if (left <= 0) {
                pid_t pid = ring(sfd);
                if (pid > 0 && kill(pid, 0) == 0) {
                    agent = pid;
                    need_agent = 0;
                    retry_ms = RETRY_MIN_MS;
                } else {
                    retry_at = now_ms() + retry_ms;
                    retry_ms = retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : retry_ms * 2;
                }
                continue;
            }
            timeout = (int)left;
        }
        struct pollfd fds[1] = {{sfd, POLLIN, 0}};
        if (poll(fds, 1, timeout) <= 0) continue;
        struct signalfd_siginfo info;
        if (read(sfd, &info, sizeof info) != sizeof info) continue;
        if (info.ssi_signo == SIGTERM) shutdown_all();
        check = 1;
    }
}
