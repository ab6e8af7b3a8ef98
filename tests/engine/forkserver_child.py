"""A child for tests/engine/isolation/test_forkserver.py, run by engine.isolation.forkserver:
``main(argv)`` does what ``argv[0]`` says. Imported by the server before it forks (``LOADED_IN`` is
its pid)."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time

LOADED_IN = os.getpid()


def main(argv: list[str]) -> int:
    action, *args = argv
    if action == "report":
        print(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "sid": os.getsid(0),
                    "loaded_in": LOADED_IN,
                    "cwd": os.getcwd(),
                    "env": dict(os.environ),
                    "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
                    "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
                    "argv": sys.argv,
                }
            )
        )
    elif action == "exit":
        print("to stdout")
        print("to stderr", file=sys.stderr)
        return int(args[0])
    elif action == "sleep_with_grandchild":
        grandchild = subprocess.Popen(["sleep", "300"])
        print(grandchild.pid, flush=True)
        time.sleep(300)
    elif action == "allocate":
        block = bytearray(int(args[0]) << 20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page
        time.sleep(30)
    elif action == "segfault":
        os.kill(os.getpid(), 11)
    elif action == "connect":
        try:
            socket.create_connection(("127.0.0.1", int(args[0])), timeout=5).close()
            print("connected")
        except OSError as exc:
            print("no connection:", exc)
    return 0
