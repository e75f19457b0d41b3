"""bcc in laminar's venv, and the kernel header tree it compiles against.

Facts this module is built on (measured on the project's hosts, see
`notes/PLATFORM.md`):

- bcc comes from Debian (`python3-bpfcc`, 0.26): the Python package lands in
  `/usr/lib/python3/dist-packages/bcc`, which a pyenv venv does not see. A
  symlink of that folder into the venv's site-packages works (libbcc is loaded
  through ctypes). The PyPI package called `bcc` is unrelated: never install it.
- bcc refuses to compile without kernel headers, and these hosts have none
  (no `/lib/modules/<release>/build`, no kheaders). Networking programs need
  only the uapi headers plus a few kernel-side names, so a small fake tree is
  enough: the userspace uapi headers (`/usr/include/linux`, `asm`,
  `asm-generic`, from `linux-libc-dev`) laid out the way bcc's kbuild flags
  expect, and five stubs:

    include/linux/kconfig.h      CONFIG_BPF_SYSCALL, which bcc's helpers demand
    include/linux/types.h        u8..u64, size_t, uintptr_t, htons & co
    include/linux/log2.h         empty
    arch/<arch>/include/asm/page.h   PAGE_SIZE
    include/uapi/linux/bpf.h     redirected to bcc's own <bcc/bpf.h>

  bcc is pointed at it with `BCC_KERNEL_SOURCE`. Tracing programs would need
  the real tree; laminar's programs are networking programs only.

`scripts/setup` runs `python -m laminar.xdp setup` (through
`scripts/setup-bcc`), which makes the symlink and builds the tree under
`<venv>/share/laminar/bcc-kernel`; both steps are no-ops when already done.
At run time `import_bcc()` sets `BCC_KERNEL_SOURCE` (unless the caller set it)
and imports bcc, or raises `BpfUnavailable` naming the missing piece.
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Final

from laminar.xdp.errors import BpfUnavailable

DEBIAN_BCC_DIR: Final = Path("/usr/lib/python3/dist-packages/bcc")
KERNEL_TREE_ENV: Final = "BCC_KERNEL_SOURCE"
# Bump when the stubs change: `build_kernel_tree` rebuilds a tree with another stamp.
KERNEL_TREE_STAMP: Final = "laminar-bcc-kernel 1"
_STAMP_FILE: Final = ".laminar-stamp"
_SETUP_HINT: Final = "run `make setup` (scripts/setup) as root"

# platform.machine() -> (bcc's arch directory name, Debian multiarch triplet)
_ARCHES: Final = {
    "x86_64": ("x86", "x86_64-linux-gnu"),
    "aarch64": ("arm64", "aarch64-linux-gnu"),
}

_KCONFIG_H: Final = """\
/* laminar fake kernel tree: the only CONFIG bcc's helpers insist on. */
#define CONFIG_BPF_SYSCALL 1
"""

_TYPES_H: Final = """\
/* laminar fake kernel tree: kernel-side type names over the uapi ones. */
#ifndef __LAMINAR_FAKE_LINUX_TYPES_H
#define __LAMINAR_FAKE_LINUX_TYPES_H
#include <uapi/linux/types.h>
#include <asm/byteorder.h>
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s8 s8;
typedef __s16 s16;
typedef __s32 s32;
typedef __s64 s64;
typedef __kernel_size_t size_t;
typedef __kernel_ssize_t ssize_t;
typedef unsigned long uintptr_t;
typedef _Bool bool;
#define true 1
#define false 0
#define htons(x) __cpu_to_be16(x)
#define ntohs(x) __be16_to_cpu(x)
#define htonl(x) __cpu_to_be32(x)
#define ntohl(x) __be32_to_cpu(x)
#endif
"""

_PAGE_H: Final = """\
/* laminar fake kernel tree */
#define PAGE_SIZE 4096
"""

_BPF_H: Final = """\
/* laminar fake kernel tree: use the bpf.h bcc was built with. */
#include <bcc/bpf.h>
"""


def venv_site_packages() -> Path:
    """The running interpreter's site-packages (the venv's, under the venv)."""
    return Path(sysconfig.get_paths()["purelib"])


def default_kernel_tree() -> Path:
    """Where setup builds the fake kernel tree: inside the venv."""
    return Path(sys.prefix) / "share" / "laminar" / "bcc-kernel"


def kernel_tree() -> Path:
    """The tree bcc will use: `$BCC_KERNEL_SOURCE` if set, else the default."""
    configured = os.environ.get(KERNEL_TREE_ENV)
    return Path(configured) if configured else default_kernel_tree()


def kernel_tree_ready(tree: Path) -> bool:
    """True when `tree` holds a complete tree of the current stamp."""
    try:
        return (tree / _STAMP_FILE).read_text() == KERNEL_TREE_STAMP
    except OSError:
        return False


def build_kernel_tree(dest: Path, include_root: Path = Path("/usr/include")) -> bool:
    """Build the fake kernel tree at `dest`; False when it was already there.

    The tree is assembled in a sibling temporary folder and renamed into place,
    so a crash never leaves a half tree with a valid stamp.
    """
    if kernel_tree_ready(dest):
        return False
    machine = platform.machine()
    if machine not in _ARCHES:
        raise BpfUnavailable(f"no fake kernel tree recipe for machine {machine!r}")
    arch, triplet = _ARCHES[machine]
    sources = {
        "linux": include_root / "linux",
        "asm-generic": include_root / "asm-generic",
        "asm": include_root / triplet / "asm",
    }
    for name, path in sources.items():
        if not path.is_dir():
            raise BpfUnavailable(
                f"uapi headers missing: {path} ({name}); install linux-libc-dev ({_SETUP_HINT})"
            )
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".bcc-kernel-", dir=dest.parent))
    try:
        shutil.copytree(sources["linux"], work / "include/uapi/linux", symlinks=True)
        shutil.copytree(sources["asm-generic"], work / "include/uapi/asm-generic", symlinks=True)
        shutil.copytree(sources["asm"], work / f"arch/{arch}/include/uapi/asm", symlinks=True)
        stubs = {
            "include/linux/kconfig.h": _KCONFIG_H,
            "include/linux/types.h": _TYPES_H,
            "include/linux/log2.h": "/* laminar fake kernel tree */\n",
            f"arch/{arch}/include/asm/page.h": _PAGE_H,
            "include/uapi/linux/bpf.h": _BPF_H,
        }
        for relative, text in stubs.items():
            path = work / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            path.write_text(text)
        (work / _STAMP_FILE).write_text(KERNEL_TREE_STAMP)
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return True


def link_bcc_into_venv(site_packages: Path | None = None) -> bool:
    """Symlink Debian's bcc package into the venv; False when already linked."""
    target = (site_packages or venv_site_packages()) / "bcc"
    if not DEBIAN_BCC_DIR.is_dir():
        raise BpfUnavailable(f"{DEBIAN_BCC_DIR} is missing: install python3-bpfcc ({_SETUP_HINT})")
    if target.is_symlink() and target.resolve() == DEBIAN_BCC_DIR.resolve():
        return False
    if target.exists() and not target.is_symlink():
        raise BpfUnavailable(
            f"{target} exists and is not laminar's symlink (a PyPI `bcc`?); remove it"
        )
    target.unlink(missing_ok=True)
    target.symlink_to(DEBIAN_BCC_DIR)
    return True


def import_bcc() -> ModuleType:
    """Import bcc ready to compile laminar's programs, or raise `BpfUnavailable`."""
    tree = kernel_tree()
    if not kernel_tree_ready(tree) and not (tree / "include").is_dir():
        raise BpfUnavailable(f"no kernel header tree for bcc at {tree} ({_SETUP_HINT})")
    os.environ.setdefault(KERNEL_TREE_ENV, str(tree))
    try:
        bcc = importlib.import_module("bcc")
    except ImportError as exc:
        raise BpfUnavailable(
            f"cannot import bcc ({exc}); install python3-bpfcc and link it into the venv "
            f"({_SETUP_HINT})"
        ) from exc
    if not hasattr(bcc, "BPF"):
        raise BpfUnavailable(
            f"the `bcc` module at {bcc.__file__} is not the BPF Compiler Collection"
        )
    return bcc
