"""A job for test_zygote.py to fork: what it does is named by its first argument."""

import os
import signal
import sys
import time


def main(argv: list[str]) -> int:
    mode, marks = argv[0], argv[1]
    if mode == "exit":
        print(f"out {os.getcwd()} {os.environ.get('PROBE')}")
        print("err", file=sys.stderr)
        return int(argv[2])
    if mode == "modules":  # what the server had imported, and where this process imports from
        print(" ".join(str(name in sys.modules) for name in argv[2:]), sys.argv[0], sys.path[0])
        return 0
    if mode == "die":
        os.kill(os.getpid(), signal.SIGKILL)

    def stop(number, _frame):
        with open(marks, "a") as out:
            out.write(f"signal {number}\n")
        sys.exit(75)  # as `boundary train` after SIGTERM: stopped at a step boundary

    signal.signal(signal.SIGTERM, stop)
    with open(marks, "a") as out:
        out.write(f"started {os.getpid()}\n")
    time.sleep(60)
    return 0
