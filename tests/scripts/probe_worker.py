"""What a Python worker sees of its process: written as JSON so that a
worker forked from cpptorchrun's forkserver can be compared, field by
field, with one that python exec'd (tests/forkserver_test.py).

  probe_worker.py --out DIR [--sleep S]      (or python -m probe_worker ...)

Each rank writes DIR/rank<R>.json, then sleeps S seconds (default 0).
"""
import json
import os
import signal
import sys
import time


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split()[1]
    return None


def fds():
    """This process's open fds and what they are (pipe, socket, a path)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except FileNotFoundError:  # the listing's own fd
            continue
        out[name] = target.split(":")[0] if target.startswith(("pipe:", "socket:", "anon_inode:")) else target
    return out


def main():
    args = sys.argv[1:]
    out = args[args.index("--out") + 1]
    sleep = float(args[args.index("--sleep") + 1]) if "--sleep" in args else 0.0
    umask = os.umask(0o22)
    os.umask(umask)
    main_module = sys.modules["__main__"]
    probe = {
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "sys_path0": sys.path[0],
        "sys_path": sys.path,
        "executable": sys.executable,
        "env": dict(os.environ),
        "main_file": getattr(main_module, "__file__", None),
        "main_name": main_module.__name__,
        "main_package": repr(getattr(main_module, "__package__", None)),
        "main_spec_name": getattr(getattr(main_module, "__spec__", None), "name", None),
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "leads_its_group": os.getpgid(0) == os.getpid(),
        "signal_mask": status("SigBlk"),
        "signals_ignored": status("SigIgn"),
        "sigint": repr(signal.getsignal(signal.SIGINT)),
        "sigterm": repr(signal.getsignal(signal.SIGTERM)),
        "sigchld": repr(signal.getsignal(signal.SIGCHLD)),
        "affinity": sorted(os.sched_getaffinity(0)),
        "umask": umask,
        "fds": fds(),
        "stdout_write_through": sys.stdout.write_through,
        "stdout_line_buffering": sys.stdout.line_buffering,
    }
    rank = os.environ.get("RANK", "x")
    path = os.path.join(out, "rank%s.json" % rank)
    with open(path + ".tmp", "w") as f:
        json.dump(probe, f)
    os.replace(path + ".tmp", path)
    print("probe rank %s written" % rank)
    time.sleep(sleep)


if __name__ == "__main__":
    main()
