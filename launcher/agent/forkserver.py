"""cpptorchrun's forkserver: Python workers forked from a warm parent.

The launcher (launcher/agent/warm_pool.h) starts one per node under
--start_method forkserver as `python -u forkserver.py MODULE...` with the
launcher's environment and CPPTORCHRUN_WARM_FD naming a Unix seqpacket
socket. It imports MODULE... once (default torch and torch.distributed),
refuses if that initialised CUDA, says "ready", and then for each become
request (base/become.h: cwd, CPUs, memory node, launcher pid, argv,
environment, and the worker's stdout and stderr as two fds) forks twice.
The grandchild, reparented to the launcher (its child subreaper), becomes
what `python -u script.py args` (or `python -u -m module args`) would be:
its own process group, PR_SET_PDEATHSIG, signal dispositions and mask as a
fresh interpreter has them, the request's environment, cwd, CPUs and
streams, sys.argv, sys.path[0], a fresh __main__; it answers "ok <pid>" and
runs the script with Python's own exit handling (an uncaught exception is
printed and exits 1, SystemExit's code is the exit code).

This file is the launcher's (embedded in the binary, written to its private
folder); it is not part of any user's program. Written against the format
in base/become.h: a change there is a change here.
"""
import ctypes
import faulthandler
import importlib
import importlib.machinery
import os
import signal
import socket
import sys
import time
import types

MAGIC = b"CPPTORCHRUN-BECOME-1"
MAX_BYTES = 192 * 1024
PR_SET_PDEATHSIG = 1
MPOL_PREFERRED = 1
SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}


class BadRequest(ValueError):
    pass


def decode(data):
    """The request's fields (base/become.h's DecodeBecome, in Python)."""
    if not data.endswith(b"\0"):
        raise BadRequest("become request: not NUL-terminated")
    fields = data[:-1].split(b"\0")
    pos = [0]

    def take(what):
        if pos[0] >= len(fields):
            raise BadRequest("become request: %s missing" % what)
        pos[0] += 1
        return fields[pos[0] - 1]

    def number(what, lo, hi):
        text = take(what)
        try:
            v = int(text)
        except ValueError:
            raise BadRequest("become request: %s is not a number" % what)
        if not lo <= v <= hi:
            raise BadRequest("become request: %s out of range" % what)
        return v

    if take("magic") != MAGIC:
        raise BadRequest("become request: wrong magic")
    req = {"cwd": os.fsdecode(take("cwd"))}
    cpus = take("cpus")
    req["cpus"] = [int(c) for c in cpus.split(b",")] if cpus else []
    req["memory_node"] = number("memory node", -1, 1023)
    req["launcher_pid"] = number("launcher pid", 0, 1 << 31)
    req["argv"] = [os.fsdecode(take("argv entry")) for _ in range(number("argc", 1, 1 << 16))]
    env = {}
    for _ in range(number("envc", 0, 1 << 16)):
        entry = take("env entry")
        name, eq, value = entry.partition(b"=")
        if not eq or not name:
            raise BadRequest("become request: env entry is not NAME=value")
        env[os.fsdecode(name)] = os.fsdecode(value)
    req["env"] = env
    if pos[0] != len(fields):
        raise BadRequest("become request: bytes after the environment")
    return req


def program_of(argv):
    """("module", name, args) or ("path", script, args) from the worker argv
    the launcher builds (launcher/config/program.cc: python -u [-m] X args)."""
    rest = argv[1:]
    if rest[:1] == ["-u"]:
        rest = rest[1:]
    if rest[:1] == ["-m"] and len(rest) >= 2:
        return "module", rest[1], rest[2:]
    if rest and not rest[0].startswith("-"):
        return "path", rest[0], rest[1:]
    raise BadRequest("argv is not python -u [-m] PROGRAM ARGS...: %r" % (argv[:4],))


def reset_signals():
    """Dispositions and mask as a fresh interpreter has them."""
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(s, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def bind_memory(libc, node):
    nr = SET_MEMPOLICY.get(os.uname().machine)
    if nr is None or node < 0:
        return
    mask = (ctypes.c_ulong * 16)()
    mask[node // 64] |= 1 << (node % 64)
    libc.syscall(nr, MPOL_PREFERRED, mask, 1024 + 1)


def become(sock, req, fds, libc):
    """In the grandchild: take on the request; the program to run."""
    launcher = req["launcher_pid"]
    deadline = time.monotonic() + 5
    while os.getppid() != launcher:
        if time.monotonic() > deadline:
            raise OSError("not reparented to the launcher (pid %d)" % launcher)
        time.sleep(0.0005)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != launcher:  # the launcher died before the prctl
        os._exit(1)
    os.setpgid(0, 0)
    reset_signals()
    program = program_of(req["argv"])
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    # What a fresh interpreter reads from its environment at start-up: the
    # faulthandler (the launcher takes a hung worker's stack with SIGABRT).
    # (reset_signals above undid the handlers of one enabled before).
    faulthandler.disable()
    if os.environ.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    os.chdir(req["cwd"])
    if req["cpus"]:
        os.sched_setaffinity(0, req["cpus"])
    bind_memory(libc, req["memory_node"])
    # What a fresh interpreter would draw differently per process.
    if "numpy" in sys.modules:
        try:
            sys.modules["numpy"].random.seed()
        except Exception:
            pass
    return program


def run(program):
    """Runs the worker's program as python would, as __main__."""
    kind, name, args = program
    if kind == "module":
        import runpy
        sys.argv = ["-m"] + args
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(name, alter_argv=True)
        return
    sys.argv = [name] + args
    sys.path[0] = os.path.dirname(os.path.realpath(name))
    path = os.path.abspath(name)
    if not os.path.isfile(path):  # a folder or zip with __main__.py
        import runpy
        runpy.run_path(name, run_name="__main__")
        return
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def serve(sock, libc):
    """Answers requests until the launcher closes the socket; in a forked
    worker, returns its program (the parent never returns one)."""
    while True:
        try:
            data, anc, _, _ = sock.recvmsg(MAX_BYTES, socket.CMSG_SPACE(8 * 4))
        except InterruptedError:
            continue
        if not data:
            return None
        fds = []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += [int.from_bytes(payload[i:i + 4], sys.byteorder)
                        for i in range(0, len(payload) - len(payload) % 4, 4)]
        try:
            if len(fds) != 2:
                raise BadRequest("become request: %d fds attached, not 2" % len(fds))
            req = decode(data)
            program_of(req["argv"])
        except BadRequest as e:
            for fd in fds:
                os.close(fd)
            sock.send(b"error " + str(e).encode())
            continue
        pid = os.fork()
        if pid == 0:
            try:
                if os.fork() != 0:
                    os._exit(0)
                program = become(sock, req, fds, libc)
                sock.send(b"ok %d" % os.getpid())
                sock.close()
                return program
            except BaseException as e:
                try:
                    sock.send(b"error forked worker: " + repr(e).encode())
                finally:
                    os._exit(1)
        for fd in fds:
            os.close(fd)
        os.waitpid(pid, 0)


def main():
    # A scheduler's warnings (Slurm signals every process of a step, this
    # one too): not the forkserver's to act on; its workers get the default
    # dispositions back (reset_signals).
    for name in ("SIGUSR1", "SIGUSR2"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    sock = socket.socket(fileno=int(os.environ.pop("CPPTORCHRUN_WARM_FD")))
    try:
        for module in sys.argv[1:]:
            importlib.import_module(module)
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "cuda") and torch.cuda.is_initialized():
            sock.send(b"error preloading %s initialised CUDA: a forked worker could not use it; "
                      b"preload modules that do not touch the GPU" % ",".join(sys.argv[1:]).encode())
            return None
    except BaseException as e:
        sock.send(b"error preloading %s failed: %s" % (",".join(sys.argv[1:]).encode(), repr(e).encode()))
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    sock.send(b"ready")
    return serve(sock, libc)


if __name__ == "__main__":
    _program = main()
    if _program is not None:
        del main
        run(_program)
