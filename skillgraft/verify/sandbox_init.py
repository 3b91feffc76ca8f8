"""The init of one sandbox run; started by :mod:`skillgraft.verify.sandbox`, never imported.

Run as ``python -I -S sandbox_init.py STATUS_FD`` with ``marshal.dumps((config, code))`` on
stdin (the interpreter is the caller's own, so the format matches; nothing about the caller shows
on this command line). Standard library only, no slow imports. The steps:

1. die with the caller (``PR_SET_PDEATHSIG``); read the config and the code;
2. ``unshare`` fresh mount, PID, network, IPC and UTS namespaces (plus a user namespace when
   not root); fork the namespace's PID 1 and report its PID;
3. PID 1 builds a fresh root on a tmpfs (read-only, nosuid binds of what the interpreter needs:
   the plan of :mod:`skillgraft.verify.sandbox_root`), pivots into it and detaches the host's
   tree, mounts a fresh ``/proc`` and a size-bounded tmpfs on ``/tmp``, ``/var/tmp`` and
   ``/dev/shm``, writes ``/tmp/method/method.py`` and forks the method: limits, no
   capabilities, no new privileges,
   the unprivileged user when root, no inherited descriptors, then ``exec`` of
   ``python -I -S method.py``;
4. PID 1 reaps every process until the method has exited, reports ``exit N`` or ``signal N``
   and exits, and the kernel kills whatever is left in the namespace.

Status lines: ``pid N`` (PID 1 as the caller sees it), ``exit N``, ``signal N``, ``error TEXT``.
"""

import ctypes
import marshal
import os
import resource
import select
import signal
import sys

CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, AT_RECURSIVE, AT_FDCWD, MNT_DETACH = 0x1, 0x2, 0x8000, -100, 0x2
SYS_MOUNT_SETATTR = 442  # Linux 5.12; the same number on every architecture but alpha
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
NOBODY = 65534
WORK = "/tmp/method"

libc = ctypes.CDLL(None, use_errno=True)


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def checked(result, what):
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def report(status_fd, line):
    os.write(status_fd, (line + "\n").encode())


def die_with_parent(parent_pid):
    """Be SIGKILLed when the process that started us ends (and exit if it already has)."""
    checked(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != parent_pid:
        os._exit(1)


def enter_namespaces(config):
    uid, gid = os.geteuid(), os.getegid()
    flags = config["clone_flags"] | (0 if uid == 0 else CLONE_NEWUSER)
    checked(libc.unshare(flags), "unshare")
    if uid != 0:  # map ourselves to root of the new user namespace
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)


def mount(source, target, fstype, flags, data):
    checked(libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()), f"mount {target}")


def bind(source, target, is_folder):
    if is_folder:
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    mount(source, target, "", MS_BIND | MS_REC, "")


def build_root(root):
    """A fresh tmpfs at ``root["stage"]`` holding read-only binds of what the interpreter needs
    (the plan of :mod:`skillgraft.verify.sandbox_root`) and empty mount points; nothing else."""
    stage = root["stage"]
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1024k,nr_inodes=4096,mode=755")
    for path, target in root["links"]:
        os.makedirs(os.path.dirname(stage + path), 0o755, exist_ok=True)
        os.symlink(target, stage + path)
    for folder in root["folders"]:
        bind(folder, stage + folder, True)
    for path in root["files"]:
        bind(path, stage + path, False)
    for path in root["mount_points"]:
        os.makedirs(stage + path, 0o755, exist_ok=True)
    attr = MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)
    checked(
        libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, stage.encode(), AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
        "mount_setattr read-only (needs Linux 5.12 or later)",
    )
    return stage


def enter_root(stage):
    """Make ``stage`` the root and drop the host's tree from this mount namespace."""
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: no system call number known for {os.uname().machine}")
    os.chdir(stage)
    checked(libc.syscall(number, b".", b"."), "pivot_root")
    checked(libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")


def build_filesystem(config):
    mount("none", "/", "", MS_REC | MS_PRIVATE, "")  # nothing below propagates to the host
    enter_root(build_root(config["root"]))
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "")
    except OSError:  # a proc mount can be refused in a user namespace: an empty /proc instead
        mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,nr_inodes=16,mode=555")
    tmpfs = f"size={config['tmp_kib']}k,nr_inodes={config['tmp_inodes']},mode=1777"
    for target in ("/tmp", "/var/tmp", "/dev/shm"):
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs)
    hostname = b"sandbox"
    checked(libc.sethostname(hostname, len(hostname)), "sethostname")


def write_method(code, as_root):
    os.mkdir(WORK, 0o700)
    script = os.path.join(WORK, "method.py")
    with open(script, "wb") as handle:
        handle.write(code)
    if as_root:
        os.chown(WORK, NOBODY, NOBODY)
    return script


def exec_method(config, script, as_root, status_fd):
    """In the method's process: limits, no privileges, then the method's interpreter."""
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.closerange(3, status_fd)  # the status pipe alone stays open, and closes on exec
    os.closerange(status_fd + 1, 1 << 16)
    os.set_inheritable(status_fd, False)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(WORK)
    limits = config["limits"]
    for name in ("CPU", "AS", "NPROC", "FSIZE", "NOFILE", "CORE"):
        value = limits[name]
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:  # every capability, also after exec
        cap += 1
    checked(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if as_root:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    python = config["python"]
    os.execve(python, [python, "-I", "-S", script], config["env"])


def run_pid1(config, code, status_fd, lifeline):
    """PID 1 of the namespace: build the filesystem, run the method, reap, report."""
    checked(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as PID 1, deaf to every signal from inside
    if select.select([lifeline], [], [], 0)[0]:  # the outer process is already gone
        os._exit(1)
    as_root = config["as_root"]
    try:
        build_filesystem(config)
        script = write_method(code, as_root)
    except OSError as exc:
        report(status_fd, f"error {exc}")
        os._exit(1)
    method = os.fork()
    if method == 0:
        try:
            exec_method(config, script, as_root, status_fd)
        except BaseException as exc:  # noqa: BLE001 - reported, never raised past exec
            report(status_fd, f"error starting the method: {exc!r}")
        os._exit(127)
    while True:  # PID 1 reaps every orphan until the method itself ends
        pid, status = os.wait()
        if pid == method:
            break
    if os.WIFSIGNALED(status):
        report(status_fd, f"signal {os.WTERMSIG(status)}")
    else:
        report(status_fd, f"exit {os.waitstatus_to_exitcode(status)}")
    os._exit(0)  # the kernel now kills every process left in the namespace


def main():
    status_fd = int(sys.argv[1])
    config, code = marshal.loads(sys.stdin.buffer.read())
    die_with_parent(config["parent_pid"])
    try:
        enter_namespaces(config)
    except OSError as exc:
        report(status_fd, f"error {exc}")
        return 1
    lifeline, keep = os.pipe()
    pid1 = os.fork()
    if pid1 == 0:
        os.close(keep)
        run_pid1(config, code, status_fd, lifeline)
    os.close(lifeline)
    report(status_fd, f"pid {pid1}")
    os.waitpid(pid1, 0)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
