"""The seccomp filter's program on both architectures, run through a BPF interpreter: no
kernel needed, and nothing probed when the module is imported (the mutation run of
``worker/sandbox/_seccomp.py`` collects it: mutants/run.py)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from agentcell.worker.sandbox import _seccomp


def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What a classic BPF seccomp program returns for one system call (the kernel's
    interpreter, for the five instructions the filter uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    code = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif op in (0x15, 0x35):  # BPF_JEQ, BPF_JGE with a constant
            hit = acc == k if op == 0x15 else acc >= k
            pc += jt if hit else jf
        elif op == 0x54:  # BPF_ALU | BPF_AND with a constant
            acc &= k
        elif op == 0x06:  # BPF_RET
            return k
        else:
            raise AssertionError(f"unexpected BPF instruction {op:#x}")


_ALLOW, _EPERM = 0x7FFF0000, 0x00050001


@pytest.mark.parametrize("machine", sorted(_seccomp._ARCHES))
def test_the_filter_refuses_exactly_what_it_says_on_each_architecture(machine: str) -> None:
    numbers = _seccomp._ARCHES[machine]
    native = numbers["AUDIT_ARCH"]
    for unix_too in (False, True):
        program = _seccomp.build(machine, refuse_unix_sockets=unix_too)
        for name in _seccomp.refused_calls(machine):
            assert _run_bpf(program, numbers[name], native) == _EPERM, name
        allowed = 39 if machine == "x86_64" else 172  # getpid
        assert _run_bpf(program, allowed, native) == _ALLOW
        # The request is compared on the 32 bits the kernel reads: high bits hide nothing.
        for request in (0x5412, 0x541C, 0x1_0000_5412):
            assert _run_bpf(program, numbers["ioctl"], native, (1, request)) == _EPERM
        assert _run_bpf(program, numbers["ioctl"], native, (1, 0x541B)) == _ALLOW  # FIONREAD
        # Another ABI's numbers mean other calls: all of them are refused.
        other = _seccomp._ARCHES["aarch64" if machine == "x86_64" else "x86_64"]["AUDIT_ARCH"]
        assert _run_bpf(program, 39, other) == _EPERM
        assert _run_bpf(program, 39, 0x40000003) == _EPERM  # i386 (int 0x80)
        unix = _run_bpf(program, numbers["socket"], native, (1, 1, 0))
        assert unix == (_EPERM if unix_too else _ALLOW)
        assert _run_bpf(program, numbers["socket"], native, (0x1_0000_0001, 1)) == unix
        assert _run_bpf(program, numbers["socket"], native, (2, 1, 0)) == _ALLOW  # AF_INET
        # No packet socket of any type; no SOCK_RAW but netlink's, flags aside; ICMP
        # datagram sockets (ping) and every other family's ordinary types stay.
        socket_nr = numbers["socket"]
        for family in (17, 0x1_0000_0011):  # AF_PACKET, and with high bits set
            for kind in (1, 2, 3, 10):
                assert _run_bpf(program, socket_nr, native, (family, kind, 0)) == _EPERM
        for family in (2, 10, 0x1_0000_0002):  # AF_INET, AF_INET6
            for kind in (3, 3 | 0x80000, 3 | 0x800, 3 | 0x80800, 0x1_0000_0003):
                assert _run_bpf(program, socket_nr, native, (family, kind, 1)) == _EPERM
            assert _run_bpf(program, socket_nr, native, (family, 2, 1)) == _ALLOW  # ICMP
            assert _run_bpf(program, socket_nr, native, (family, 2 | 0x80000, 0)) == _ALLOW
            assert _run_bpf(program, socket_nr, native, (family, 1 | 0x800, 0)) == _ALLOW
        assert _run_bpf(program, socket_nr, native, (16, 3, 0)) == _ALLOW  # netlink raw
        assert _run_bpf(program, socket_nr, native, (16, 3 | 0x80000, 0)) == _ALLOW
    if machine == "x86_64":  # x32: the same arch value, bit 30 set in the number
        assert _run_bpf(program, 0x40000000 | 39, native) == _EPERM
        assert _run_bpf(program, 0x40000000, native) == _EPERM  # x32's read: the bit alone
        assert _run_bpf(program, 0x3FFFFFFF, native) == _ALLOW  # below it: no x32 call
    else:  # no x32 ABI here: a number that high is no call (the kernel says ENOSYS)
        assert _run_bpf(program, 0x40000000 | 39, native) == _ALLOW
    for name in set(_seccomp.REFUSED_CALLS) - set(_seccomp.refused_calls(machine)):
        assert name not in numbers, name  # left out only where the call does not exist


#: The kernel's own numbering, as the C library's headers give it (linux-libc-dev).
HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # arm64 takes the generic table
}


@pytest.mark.parametrize("machine", sorted(_seccomp._ARCHES))
def test_every_call_number_is_the_kernels(machine: str) -> None:
    # The filter compares numbers: one wrong number refuses another call and lets the
    # named one through, and every other test reads the same table.
    header = HEADERS[machine]
    if not header.exists():
        pytest.skip(f"no {header} here (the linux-libc-dev headers)")
    numbers = dict(re.findall(r"^#define __NR_(\w+) (\d+)$", header.read_text(), re.MULTILINE))
    table = _seccomp._ARCHES[machine]
    for name, number in table.items():
        if name != "AUDIT_ARCH":
            assert numbers[name] == str(number), (machine, name, number, numbers[name])
    assert set(_seccomp.refused_calls(machine)) <= set(table)
    # AUDIT_ARCH_X86_64 and AUDIT_ARCH_AARCH64 (linux/audit.h): the ELF machine number,
    # 64-bit and little-endian.
    elf_machine = {"x86_64": 62, "aarch64": 183}[machine]
    assert table["AUDIT_ARCH"] == elf_machine | 0x80000000 | 0x40000000
