#!/usr/bin/env python3
"""CPU of a `perf record --call-graph` profile by thread and by category.

    perf script -i perf.data -F comm,tid,ip,sym > script.txt
    python3 bench/perf_categories.py script.txt [HZ ENTRIES]

Groups samples by thread name (the mount's fuser-N threads together) and
puts each sample in the first category whose pattern matches a frame,
walking from the leaf up (RULES, in order, per frame): kernel paths
(fdatasync, write, /dev/fuse, TCP, epoll/futex, the scheduler), then
Sextant's crates, gRPC (tonic/hyper/h2), prost, tokio, libc allocation.
With HZ (perf's -F) and ENTRIES, also prints µs per entry. Used by
docs/BENCHMARKS.md ("the sync target checked").
"""

import collections
import re
import sys

RULES = [
    ("fdatasync (syscall, kernel)", r"__x64_sys_fdatasync"),
    ("write(2) (journal; in the mount: file data)", r"ksys_write|__x64_sys_write\b|vfs_write"),
    ("/dev/fuse read/write (kernel)", r"fuse_dev_(read|write|do_read|do_write)"),
    (
        "TCP send/recv (kernel)",
        r"tcp_(sendmsg|recvmsg)|sock_(read|write)_iter|__sys_(sendto|recvfrom)|unix_stream",
    ),
    ("epoll/futex/park (kernel)", r"__x64_sys_(epoll_wait|futex|epoll_ctl)"),
    ("scheduler (kernel, other)", r"__schedule|schedule_hrtimeout|finish_task_switch"),
    ("other syscalls (kernel)", r"do_syscall_64"),
    ("page faults / memcg (kernel)", r"asm_exc_page_fault"),
    ("engine (sextant_engine)", r"^sextant_engine::"),
    ("fuse handlers (sextant_fuse)", r"^<?sextant_fuse::"),
    ("fuser session loop", r"^fuser::"),
    ("client (sextant_client)", r"^<?sextant_client::"),
    ("prost encode/decode", r"prost::"),
    ("gRPC/HTTP2 (tonic, hyper, h2)", r"tonic::|hyper::|h2::|hyper_util::|http_body"),
    ("server request handling (sextant_server)", r"^<?sextant_server::"),
    ("tokio runtime", r"tokio::|mio::"),
    ("malloc/free/memcpy (libc)", r"malloc|free|memmove|memcpy|_int_"),
]
COMPILED = [(c, re.compile(p)) for c, p in RULES]


def category(frames):
    for frame in frames:
        for name, rx in COMPILED:
            if rx.search(frame):
                return name
    return "other/unknown"


def samples(path):
    """(thread name, [frames, leaf first]) per sample of `perf script`."""
    comm, frames = None, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                if comm is not None:
                    yield comm, frames
                comm, frames = None, []
            elif not line[0].isspace():
                if comm is not None:
                    yield comm, frames
                comm, frames = line.split()[0], []
            else:
                parts = line.strip().split(None, 1)
                if len(parts) == 2:
                    frames.append(parts[1])
    if comm is not None:
        yield comm, frames


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    per = collections.defaultdict(collections.Counter)
    for comm, frames in samples(sys.argv[1]):
        per["fuser-*" if comm.startswith("fuser") else comm][category(frames)] += 1
    total = sum(sum(c.values()) for c in per.values())
    scale = 1e6 / float(sys.argv[2]) / float(sys.argv[3]) if len(sys.argv) >= 4 else None
    for comm, c in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(c.values())
        extra = f" = {n * scale:.0f} µs/entry" if scale else ""
        print(f"{comm}: {n} samples ({100 * n / total:.1f}%){extra}")
        for name, v in c.most_common():
            extra = f"  {v * scale:5.0f} µs/entry" if scale else ""
            print(f"   {100 * v / n:5.1f}%{extra}  {name}")


if __name__ == "__main__":
    main()
