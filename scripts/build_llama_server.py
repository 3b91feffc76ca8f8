"""Build llama-server from the installed llama-cpp-python's llama.cpp sources, or reuse the cache.

Usage: python scripts/build_llama_server.py [--jobs N] [--force]
Prints where the binary is; exits 1 with the reason when it cannot be built.
"""

from __future__ import annotations

import argparse
import os
import sys

from skillgraft.errors import ServerBuildError
from skillgraft.server.build import BINARY_ENV, binary_version, build_server, find_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the cache holds a build")
    args = parser.parse_args(argv)
    try:
        if os.environ.get(BINARY_ENV):
            binary = find_server()
            print(f"{BINARY_ENV} names {binary} ({binary_version(binary)}): nothing to build")
            return 0
        build = build_server(jobs=args.jobs, force=args.force)
    except ServerBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"llama-server {build.llama_cpp_build} at {build.binary} (built in {build.build_s} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
