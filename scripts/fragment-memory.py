#!/usr/bin/env python3
"""Leaves the machine's free memory fragmented the way a build leaves it: free pages scattered
inside pageblocks of the unmovable migrate type, where a later movable allocation (a balloon's,
a host's) can only take part of a block, which makes the kernel boost its watermarks.

Pipe buffers are unmovable pages: each process fills PIPES pipes of 64 KiB interleaved with as
much anonymous memory, then closes every other pipe and frees the anonymous memory, and holds
the rest until interrupted (Ctrl-C, or kill). The finding that uses it:
docs/findings/2026-12-05-bands-moved-by-the-watermark-boost.md.

Usage: scripts/fragment-memory.py [--processes N] [--pipes N]
  --processes N  processes (default 6): each is limited by its open-file limit
  --pipes N      pipes per process (default 9500, under the usual limit of 20,000 files)
"""

import argparse
import os
import signal
import sys

BUFFER = 65536  # a pipe's default capacity: 16 pages


def fragment(pipes):
    held, anonymous = [], []
    chunk = b"x" * BUFFER
    for _ in range(pipes):
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            os.write(write, chunk)
        except BlockingIOError:
            pass
        held.append((read, write))
        anonymous.append(bytearray(BUFFER))
    for read, write in held[::2]:
        os.close(read)
        os.close(write)
    del anonymous
    signal.pause()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--pipes", type=int, default=9500)
    args = parser.parse_args()
    children = []
    for _ in range(args.processes):
        pid = os.fork()
        if pid == 0:
            fragment(args.pipes)
            os._exit(0)
        children.append(pid)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    held_mib = args.processes * (args.pipes // 2) * BUFFER >> 20
    print(f"{args.processes} processes hold {held_mib} MiB of pipe buffers in unmovable "
          f"pageblocks, with as much freed between them; Ctrl-C frees them", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(main())
