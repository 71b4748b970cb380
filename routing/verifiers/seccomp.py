"""A seccomp filter for the sandbox, as the raw BPF program that ``bwrap --seccomp FD`` loads.

Written by hand (a few classic-BPF instructions) so it needs no library. Invariants:

- Only native x86-64 system calls run: a call made with another ABI (``int 0x80`` i386 calls, x32)
  kills the whole process, since its numbers would slip past the checks below.
- Calls that only attack the kernel or escape namespaces fail with EPERM: ptrace and other processes'
  memory, mounts and namespaces (``unshare``, ``setns``, the new mount API), kernel modules, kexec,
  BPF, perf, userfaultfd, keyrings, io_uring, file handles, pidfd signals and fd stealing, clocks,
  swap, reboot, quotas, personality (ASLR), syslog, I/O ports.
- ``clone3`` answers ENOSYS, so libc falls back to ``clone`` (its flags are checked by the kernel:
  no capabilities, and bwrap's ``--disable-userns`` forbids new user namespaces).
- ``socket`` works for AF_UNIX, AF_INET and AF_INET6 only (the network namespace has no route out);
  AF_VSOCK, AF_NETLINK, AF_PACKET and the rest answer EAFNOSUPPORT. vsock in particular is not
  network-namespaced and would reach the hypervisor.

On other architectures :func:`program` returns ``None`` and the sandbox runs without this filter.
"""

from __future__ import annotations

import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little endian).
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16

_SYS_SOCKET = 41
_SYS_CLONE3 = 435
_ALLOWED_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6

DENIED_X86_64 = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135, "vhangup": 153,
    "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "chroot": 161, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169,
    "iopl": 172, "ioperm": 173, "create_module": 174, "init_module": 175, "delete_module": 176,
    "get_kernel_syms": 177, "query_module": 178, "quotactl": 179, "nfsservctl": 180,
    "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248,
    "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "pidfd_send_signal": 424,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
}  # fmt: skip


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _assemble(ops: list[tuple[int, int, str | None]], labels: dict[str, int]) -> bytes:
    """``ops`` are (code, k, label jumped to when true); conditional jumps fall through when false."""
    out = []
    for index, (code, k, target) in enumerate(ops):
        jt = 0 if target is None else labels[target] - index - 1
        if not 0 <= jt <= 255:
            raise ValueError(f"seccomp: jump from {index} to {target} out of range")
        out.append(_insn(code, k, jt))
    return b"".join(out)


def x86_64_program() -> bytes:
    """The filter for x86-64, whatever machine this runs on (the tests decode it)."""
    ops: list[tuple[int, int, str | None]] = [
        (_LD_W_ABS, _OFFSET_ARCH, None),
        (_JEQ_K, AUDIT_ARCH_X86_64, "native"),
        (_RET_K, _RET_KILL_PROCESS, None),
    ]
    labels = {"native": len(ops)}
    ops += [(_LD_W_ABS, _OFFSET_NR, None), (_JGE_K, X32_SYSCALL_BIT, "kill")]
    ops += [(_JEQ_K, nr, "eperm") for nr in sorted(DENIED_X86_64.values())]
    ops += [(_JEQ_K, _SYS_CLONE3, "enosys"), (_JEQ_K, _SYS_SOCKET, "socket")]
    for label, ret in (
        ("allow", _RET_ALLOW),
        ("eperm", _RET_ERRNO | errno.EPERM),
        ("enosys", _RET_ERRNO | errno.ENOSYS),
        ("kill", _RET_KILL_PROCESS),
    ):
        labels[label] = len(ops)
        ops.append((_RET_K, ret, None))
    labels["socket"] = len(ops)  # classic BPF only jumps forward: this block has its own returns
    ops.append((_LD_W_ABS, _OFFSET_ARG0, None))
    ops += [(_JEQ_K, family, "family_ok") for family in _ALLOWED_FAMILIES]
    ops.append((_RET_K, _RET_ERRNO | errno.EAFNOSUPPORT, None))
    labels["family_ok"] = len(ops)
    ops.append((_RET_K, _RET_ALLOW, None))
    return _assemble(ops, labels)


def program() -> bytes | None:
    """The filter for this machine, or ``None`` where none is written (not x86-64)."""
    return x86_64_program() if platform.machine() in ("x86_64", "AMD64") else None
