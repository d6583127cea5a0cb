"""The seccomp filter every instance process runs under, compiled with libseccomp.

The floor is Docker's default profile for a container without `CAP_SYS_ADMIN`: an
allow-list of system calls (anything else fails with `EPERM`), `clone` only without
namespace flags, `clone3` answering `ENOSYS` (so the C library falls back to
`clone`, where the flags can be checked), `personality` only for the usual
personas, no `AF_VSOCK` sockets. Stricter than Docker's:

- no io_uring (`io_uring_setup`, `_enter`, `_register`), whose code has been behind
  many recent escapes;
- no new user namespaces, no mount calls, no `keyctl`/`add_key`/`request_key`, `bpf`,
  `perf_event_open`, `userfaultfd`, `kexec_*`, module calls (Docker's list has none of
  these either; they are named here so a test can check each);
- native x86-64 calls only: the 32-bit entry points (`int 0x80`, x32) are not added to
  the filter, so libseccomp's bad-architecture action kills such a call.

The filter is compiled here, in the control plane, and handed to the launcher as
BPF bytes: the guest side installs it with one `prctl` and needs no libseccomp.
"""

from __future__ import annotations

import errno
import functools
import tempfile

import pyseccomp as seccomp


def _words(text: str) -> list[str]:
    return text.split()


#: Docker's default allow-list (moby `profiles/seccomp/default.json`), with the calls it
#: allows for its default capabilities (`chroot`, `ptrace` on kernels from 4.8), less io_uring.
ALLOWED = _words(
    """
accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime
clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect
copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old
epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit
exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir
fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr
flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync
ftruncate ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents
getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32
getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid
getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage getsid getsockname
getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr
inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy
io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit
ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32
lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr
lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod
mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap
msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep
newfstatat _newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2
pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2
prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read
readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg
remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq
rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend
rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr
sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler
sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr
sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop
semtimedop semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid
setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid
setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address
setuid setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd
signalfd4 sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64
statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create
timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime
timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime
timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat
utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev
process_vm_readv process_vm_writev ptrace arch_prctl modify_ldt chroot
"""
)

#: Refused with EPERM, whatever a later edit of the allow-list says.
DENIED = _words(
    """
io_uring_setup io_uring_enter io_uring_register keyctl add_key request_key bpf
perf_event_open userfaultfd kexec_load kexec_file_load init_module finit_module
delete_module mount umount2 pivot_root move_mount open_tree fsopen fsmount fsconfig
fspick mount_setattr unshare setns swapon swapoff reboot acct
"""
)

CLONE_NAMESPACE_FLAGS = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET."""
AF_VSOCK = 40
PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
"""PER_LINUX, UNAME26, ADDR_NO_RANDOMIZE (alone and with UNAME26), and the query."""


def _known(name: str) -> bool:
    try:
        seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
    except (ValueError, OSError):
        return False
    return True


@functools.cache
def instance_filter() -> bytes:
    """The filter as BPF bytes (a `sock_filter` array), for `PR_SET_SECCOMP`."""
    denied = set(DENIED)
    rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
    # A binary tree of the allowed calls, not a list: every call of every process pays
    # for the filter, and a list of 350 makes a common call walk far down it.
    rules.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)
    for name in ALLOWED:
        if name not in denied and _known(name):
            rules.add_rule(seccomp.ALLOW, name)
    rules.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NAMESPACE_FLAGS, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(seccomp.ALLOW, "socket", seccomp.Arg(0, seccomp.NE, AF_VSOCK))
    for persona in PERSONAS:
        rules.add_rule(seccomp.ALLOW, "personality", seccomp.Arg(0, seccomp.EQ, persona))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()
