# One system call of each group the seccomp filter denies by default, each harmless when it
# succeeds, with the errno it got (0: it succeeded). As root, umount2 and delete_module fail with
# ENOENT when the call reaches the kernel's own checks.
import ctypes
import errno
import json
import os
import platform
import signal

NR = {
    "x86_64": {"ptrace": 101, "keyctl": 250, "unshare": 272, "clone": 56, "clone3": 435, "umount2": 166, "delete_module": 176},
    "aarch64": {"ptrace": 117, "keyctl": 219, "unshare": 97, "clone": 220, "clone3": 435, "umount2": 39, "delete_module": 106},
}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000


def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(NR[name], *args)
    return 0 if r >= 0 else ctypes.get_errno()


def in_child(name, *args):
    """Makes the call in a forked child, which exits with its errno."""
    pid = os.fork()
    if pid == 0:
        os._exit(call(name, *args))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


res = {}
# ptrace: attach to a child of our own.
child = os.fork()
if child == 0:
    signal.pause()
    os._exit(0)
res["ptrace"] = call("ptrace", 16, child, None, None)  # PTRACE_ATTACH
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
res["keyring"] = call("keyctl", 0, ctypes.c_long(-3), 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
res["namespaces"] = in_child("unshare", CLONE_NEWUSER)
# clone with CLONE_NEWUSER: the child (a copy of this process) exits at once.
pid = libc.syscall(NR["clone"], CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
res["clone_newuser"] = ctypes.get_errno() if pid < 0 else 0
if pid > 0:
    os.waitpid(pid, 0)
res["clone3"] = call("clone3", None, 0)  # EINVAL (size 0) when it reaches the kernel
res["mount"] = call("umount2", b"/skein-no-such-mount", 0)
res["modules"] = call("delete_module", b"skein_no_such_module", os.O_NONBLOCK)
with open("/proc/self/status") as f:
    status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
res["no_new_privs"] = status.get("NoNewPrivs")
res["seccomp"] = status.get("Seccomp")
res["names"] = {k: errno.errorcode.get(v, str(v)) for k, v in res.items() if isinstance(v, int)}
print(json.dumps(res))
