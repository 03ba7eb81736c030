"""tools/torch_launcher_tests.py: PyTorch's own launcher tests against cpptorchrun.

Runs the test module of PyTorch's test/distributed/launcher that drives
`torch.distributed.run` in-process through `launch.main(args)` (run_test.py in
torch 1.x, test_run.py later), with its bin/ worker scripts, once per launcher:
every `torch.distributed.run.main(args)` / `run(args)` the tests make becomes a
subprocess `[launcher] + args`, and the outcome is turned back into what the
in-process call would have done.

Usage (with the interpreter that has torch; PyTorch's files live outside this
repository, e.g. /tmp/torchtests/test/distributed/launcher):

    /usr/bin/python3 tools/torch_launcher_tests.py \
        --pytorch_tests /tmp/torchtests/test/distributed/launcher \
        --launcher /usr/local/bin/cpptorchrun --reference

    --pytorch_tests DIR   the launcher test folder (or a PyTorch checkout above it)
    --launcher PATH       the launcher under test (the cpptorchrun column)
    --reference           also run every test against the reference launcher
                          (--reference_launcher, default /usr/bin/torchrun): the
                          torchrun column. Its results are cached in
                          --reference_cache; without --reference the cache is
                          read when it is there, else the column reads "-".
    -k SUBSTRING          only tests whose name contains it (repeatable)
    --test_timeout S      per test and launcher (default 300); --launch_timeout S
                          per launcher call (default 240)
    --keep_etcd           do not replace etcd (see below)
    --log_dir DIR         full output of every test run (default: a temp folder)
    -v                    print every test's full reason, not its first lines

Output: one line per test (name, torchrun result, cpptorchrun result), then for
each failure its first lines of why. Exit 0 when every test that passes against
torchrun passes against the launcher (or, with no reference results at all,
when every test passes), else 1.

What the harness does, the same for both columns:
  * Each test runs in a fresh child interpreter (its own process group, killed
    on timeout) that loads the test module from DIR (so its `path()` finds bin/)
    and replaces `torch.distributed.run.main`/`run` with a subprocess call of
    `[launcher] + args` in the environment the test set (os.environ at the call,
    PET_* included), plus PYTHON_EXEC=sys.executable when unset.
  * Exit 0 returns normally. A non-zero exit raises: ChildFailedError (a
    subclass of torch's) when the launcher reports failed workers (torchrun's
    ChildFailedError traceback or its "Root Cause (first observed failure)"
    summary, which cpptorchrun prints too); else the Python exception named on
    the launcher's last traceback line when it is a builtin one (ValueError,
    RuntimeError: torchrun's up-front refusals); else ValueError for exit code 2
    (a usage error: the configuration refused before anything started, which is
    what the tests' `assertRaises(ValueError)` checks); else RuntimeError.
  * Debian's torchrun (torch 1.13) on Python 3.11 crashes at start-up:
    `Std.from_str` iterates an IntFlag, which no longer yields NONE (0) or ALL
    (3), so `--redirects`/`--tee` "0" parse to None (explicit `--redirects 0
    --tee 0` does not help). The reference is therefore run as
    `python3 THIS_FILE --_torchrun_shim /usr/bin/torchrun ARGS`, which replaces
    `Std.from_str` with one that looks the value up among all members (only when
    the bug is present) and then runs /usr/bin/torchrun itself via runpy.
  * etcd: the tests start an etcd server and use --rdzv_backend=etcd. Without an
    etcd binary and the python-etcd module (the case on Debian 12), the harness
    replaces EtcdServer with a stand-in whose endpoint is localhost:<free port>
    and rewrites --rdzv_backend=etcd / PET_RDZV_BACKEND=etcd to c10d for the
    launcher call (both launchers then host a c10d store on that endpoint).
    --keep_etcd turns this off (those tests then fail for both launchers).
  * torch.testing._internal.common_utils does not import without expecttest;
    when it fails a stand-in with the few names the tests use is installed.
  * Tests that patch torch internals in the test process (mock.patch of
    LocalElasticAgent, events.record, rendezvous handlers, torch.cuda) cannot
    see a launcher in another process; they fail for both columns.

Only the standard library and torch. Nothing of PyTorch's is kept here.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
import unittest

HERE = os.path.abspath(__file__)
MODULE_NAMES = ("run_test.py", "test_run.py")
DEFAULT_REFERENCE = "/usr/bin/torchrun"


# --------------------------------------------------------------------------
# The reference launcher shim (Debian's torchrun on Python 3.11).
# --------------------------------------------------------------------------

def _fix_std_from_str():
    """Make torch 1.13's Std.from_str work on Python >= 3.11 (see the top)."""
    try:
        from torch.distributed.elastic.multiprocessing import api
    except Exception:  # noqa: BLE001 - nothing to fix
        return
    std = api.Std
    if std.from_str("0") is not None and std.from_str("3") is not None:
        return
    original = std.from_str.__func__

    def from_str(cls, vm):
        members = {int(m): m for m in cls.__members__.values()}

        def one(v):
            return members[int(v)]

        if re.match(api._VALUE_REGEX, vm):
            return one(vm)
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): one(v) for i, v in (m.split(":") for m in vm.split(","))}
        return original(cls, vm)  # raises its ValueError

    std.from_str = classmethod(from_str)


def torchrun_shim(argv):
    """python3 THIS --_torchrun_shim TORCHRUN ARGS...: run TORCHRUN, patched."""
    import runpy
    target = argv[0]
    _fix_std_from_str()
    sys.argv = [target] + argv[1:]
    runpy.run_path(target, run_name="__main__")


def _is_python_script(path):
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
        return first.startswith(b"#!") and b"python" in first
    except OSError:
        return False


def reference_command(path):
    if _is_python_script(path):
        return [sys.executable, HERE, "--_torchrun_shim", path]
    return [path]


# --------------------------------------------------------------------------
# In the child: load the module, replace the launcher call, run one test.
# --------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _etcd_available():
    binary = os.environ.get("TORCHELASTIC_ETCD_BINARY_PATH", "")
    if not (binary and os.path.isfile(binary)) and not shutil.which("etcd"):
        return False
    try:
        import etcd  # noqa: F401
    except ImportError:
        return False
    return True


class _EtcdStandIn:
    """What the tests use of EtcdServer; the endpoint gets c10d (see the top)."""

    def __init__(self, *args, **kwargs):
        self._port = _free_port()
        self._host = "localhost"

    def start(self, *args, **kwargs):
        pass

    def stop(self):
        pass

    def get_port(self):
        return self._port

    def get_host(self):
        return self._host

    def get_endpoint(self):
        return f"{self._host}:{self._port}"

    def get_client(self):
        raise RuntimeError("no etcd here (torch_launcher_tests.py stand-in)")


def _install_common_utils_stand_in():
    try:
        import torch.testing._internal.common_utils  # noqa: F401
        return False
    except Exception:  # noqa: BLE001 - expecttest and friends missing
        pass
    m = types.ModuleType("torch.testing._internal.common_utils")
    m.TEST_WITH_DEV_DBG_ASAN = os.getenv("PYTORCH_TEST_WITH_DEV_DBG_ASAN", "0") == "1"
    m.TEST_WITH_ASAN = os.getenv("PYTORCH_TEST_WITH_ASAN", "0") == "1"
    m.TEST_WITH_TSAN = os.getenv("PYTORCH_TEST_WITH_TSAN", "0") == "1"
    m.IS_WINDOWS = sys.platform == "win32"
    m.IS_MACOS = sys.platform == "darwin"
    m.IS_CI = False
    m.sandcastle_skip_if = unittest.skipIf
    m.skip_but_pass_in_sandcastle_if = unittest.skipIf
    m.TestCase = unittest.TestCase
    m.run_tests = lambda *a, **k: unittest.main()
    sys.modules[m.__name__] = m
    return True


_ETCD_FLAG = re.compile(r"^(--rdzv[_-]backend=)etcd(-v2)?$")


def _translate(args, env, etcd_to_c10d):
    args = list(args)
    if etcd_to_c10d:
        out = []
        i = 0
        while i < len(args):
            a = args[i]
            if _ETCD_FLAG.match(a):
                a = _ETCD_FLAG.sub(r"\1c10d", a)
            elif a in ("--rdzv_backend", "--rdzv-backend") and i + 1 < len(args) \
                    and args[i + 1] in ("etcd", "etcd-v2"):
                out += [a, "c10d"]
                i += 2
                continue
            out.append(a)
            i += 1
        args = out
        if env.get("PET_RDZV_BACKEND") in ("etcd", "etcd-v2"):
            env["PET_RDZV_BACKEND"] = "c10d"
    return args


class LauncherChildFailed(Exception):
    """Stands in for torch's ChildFailedError (made a subclass of it below)."""


class LauncherUsageError(ValueError):
    pass


class LauncherFailed(RuntimeError):
    pass


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):(?: |$)(.*)$")


def _classify(rc, output):
    """The exception the in-process call would have raised, from exit + output."""
    lines = output.splitlines()
    exc_lines = [m for m in (_EXC_LINE.match(l) for l in lines) if m]
    if any(m.group(1).endswith("ChildFailedError") for m in exc_lines) or \
            "Root Cause (first observed failure)" in output:
        return "ChildFailedError"
    if exc_lines:
        import builtins
        name = exc_lines[-1].group(1).rsplit(".", 1)[-1]
        obj = getattr(builtins, name, None)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return name
    if rc == 2:
        return "usage"
    return "other"


def _tail(text, n):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-n:]


def _kill_tree(proc, grace):
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


class _Launcher:
    def __init__(self, cmd, timeout, etcd_to_c10d, log):
        self.cmd = cmd
        self.timeout = timeout
        self.etcd_to_c10d = etcd_to_c10d
        self.log = log
        self.calls = []

    def __call__(self, args=None):
        if args is None:
            args = sys.argv[1:]
        if not isinstance(args, (list, tuple)):
            raise TypeError("torch_launcher_tests.py translates list arguments only; "
                            f"got {type(args).__name__}")
        env = dict(os.environ)
        env.setdefault("PYTHON_EXEC", sys.executable)
        full = self.cmd + _translate(args, env, self.etcd_to_c10d)
        pet = {k: v for k, v in env.items() if k.startswith("PET_")}
        t0 = time.time()
        out_file = tempfile.TemporaryFile()
        proc = subprocess.Popen(full, env=env, stdout=out_file, stderr=subprocess.STDOUT)
        timed_out = False
        try:
            rc = proc.wait(self.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc, 15)
            rc = proc.returncode
        out_file.seek(0)
        output = out_file.read().decode("utf-8", "replace")
        out_file.close()
        call = {"cmd": full, "pet_env": pet, "rc": rc, "timed_out": timed_out,
                "seconds": round(time.time() - t0, 1), "tail": _tail(output, 6)}
        self.calls.append(call)
        self.log.write(f"\n==== launcher call: {' '.join(full)}\n     PET_*: {pet}\n")
        self.log.write(output)
        self.log.write(f"==== rc={rc} timed_out={timed_out} in {call['seconds']}s\n")
        self.log.flush()
        if timed_out:
            raise LauncherFailed(f"launcher timed out after {self.timeout}s")
        if rc == 0:
            return None
        kind = _classify(rc, output)
        call["raised"] = kind
        msg = f"launcher exit code {rc}: " + " | ".join(_tail(output, 2))
        if kind == "ChildFailedError":
            raise LauncherChildFailed(msg)
        if kind == "usage":
            raise LauncherUsageError(msg)
        if kind != "other":
            import builtins
            exc = getattr(builtins, kind, None)
            if isinstance(exc, type) and issubclass(exc, BaseException):
                raise exc(msg)
        raise LauncherFailed(msg)


def find_module(pytorch_tests):
    cands = [pytorch_tests, os.path.join(pytorch_tests, "test", "distributed", "launcher")]
    for d in cands:
        for name in MODULE_NAMES:
            p = os.path.join(d, name)
            if os.path.isfile(p):
                return os.path.abspath(p)
    raise SystemExit(f"no {' or '.join(MODULE_NAMES)} under {pytorch_tests}")


def load_module(path, etcd_to_c10d):
    import importlib.util
    _install_common_utils_stand_in()
    if etcd_to_c10d:
        from torch.distributed.elastic.rendezvous import etcd_server
        etcd_server.EtcdServer = _EtcdStandIn
    # PyTorch's test file, loaded as its own runner loads it: with its
    # folder on the path, where it may find the helpers it imports.
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def list_tests(mod):
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    out = []

    def walk(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                out.append(t.id().split(".", 1)[1] if "." in t.id() else t.id())
    walk(suite)
    return out


def child_main(opts):
    log = sys.stderr
    etcd_to_c10d = not opts.keep_etcd and not _etcd_available()
    result = {"status": "ERROR", "why": [], "calls": []}
    launcher = None
    try:
        mod = load_module(opts.module, etcd_to_c10d)
        from torch.distributed.elastic.multiprocessing import errors
        global LauncherChildFailed
        LauncherChildFailed = type("ChildFailedError", (errors.ChildFailedError,), {
            "__init__": lambda self, msg: (setattr(self, "name", "launcher"),
                                           setattr(self, "failures", {}),
                                           Exception.__init__(self, msg))[-1],
            "__str__": lambda self: self.args[0],
        })
        import torch.distributed.run as run_mod
        launcher = _Launcher(json.loads(opts.launcher_cmd), opts.launch_timeout,
                             etcd_to_c10d, log)
        run_mod.main = launcher
        run_mod.run = launcher
        suite = unittest.defaultTestLoader.loadTestsFromName(opts.test, mod)
        res = unittest.TestResult()
        suite.run(res)
        if res.skipped:
            result["status"] = "SKIP"
            result["why"] = [res.skipped[0][1]]
        elif res.failures or res.errors:
            result["status"] = "FAIL" if res.failures and not res.errors else "ERROR"
            tb = (res.failures + res.errors)[0][1]
            log.write(tb)
            lines = [l for l in tb.splitlines() if l.strip()]
            # the exception line(s): after the last "File ..." frame
            last = max((i for i, l in enumerate(lines) if l.lstrip().startswith("File ")),
                       default=-1)
            exc = [l.strip() for l in lines[last + 2:]] if last >= 0 else lines[-2:]
            result["why"] = exc[:4] or lines[-1:]
        else:
            result["status"] = "PASS"
    except BaseException as e:  # noqa: BLE001 - a broken module, reported
        result["why"] = traceback.format_exception_only(type(e), e)[-1:]
        log.write(traceback.format_exc())
    if launcher is not None:
        result["calls"] = launcher.calls
    with open(opts.result, "w") as f:
        json.dump(result, f)
    log.flush()
    os._exit(0)


# --------------------------------------------------------------------------
# The parent: one child per test and launcher, then the table.
# --------------------------------------------------------------------------

def run_one(module, test, launcher_cmd, opts, log_path):
    fd, result_path = tempfile.mkstemp(prefix="tlt-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, HERE, "--_child", "--module", module, "--test", test,
           "--launcher_cmd", json.dumps(launcher_cmd), "--result", result_path,
           "--launch_timeout", str(opts.launch_timeout)]
    if opts.keep_etcd:
        cmd.append("--keep_etcd")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=tempfile.gettempdir())
        try:
            proc.wait(opts.test_timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 30)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
    # whatever the test left in its process group goes too
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        with open(result_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"status": "ERROR", "why": ["no result from the test process"], "calls": []}
    os.unlink(result_path)
    if timed_out:
        result = {"status": "TIMEOUT", "why": [f"test ran over {opts.test_timeout}s"],
                  "calls": result.get("calls", [])}
    result["seconds"] = round(time.time() - t0, 1)
    result["log"] = log_path
    return result


def describe(result, verbose):
    lines = list(result.get("why", []))
    for i, c in enumerate(result.get("calls", [])):
        if c["rc"] != 0 or c.get("timed_out") or verbose:
            head = f"call {i + 1}: rc={c['rc']}"
            if c.get("raised"):
                head += f" -> {c['raised']}"
            if c.get("timed_out"):
                head += " (timed out)"
            if verbose:
                lines.append(head + ": " + " ".join(c["cmd"]))
            else:
                lines.append(head + (": " + c["tail"][-1] if c["tail"] else ""))
            if verbose:
                lines += ["    " + t for t in c["tail"]]
    return lines if verbose else lines[:4]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pytorch_tests")
    p.add_argument("--launcher")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--reference_launcher", default=DEFAULT_REFERENCE)
    p.add_argument("--reference_cache",
                   default=os.path.join(tempfile.gettempdir(),
                                        "torch_launcher_tests.reference.json"))
    p.add_argument("-k", action="append", default=[], dest="only")
    p.add_argument("--test_timeout", type=float, default=300)
    p.add_argument("--launch_timeout", type=float, default=240)
    p.add_argument("--keep_etcd", action="store_true")
    p.add_argument("--log_dir")
    p.add_argument("-v", "--verbose", action="store_true")
    # child mode
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--module", help=argparse.SUPPRESS)
    p.add_argument("--test", help=argparse.SUPPRESS)
    p.add_argument("--launcher_cmd", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if not opts._child and (not opts.pytorch_tests or not opts.launcher):
        p.error("--pytorch_tests and --launcher are required")
    return opts


def list_module_tests(module, only):
    """The module's test ids (those containing one of `only`, when given),
    listed in a throw-away interpreter: the module imports torch."""
    listing = subprocess.run([sys.executable, HERE, "--_list", module],
                             capture_output=True, text=True, timeout=300)
    if listing.returncode != 0:
        sys.stderr.write(listing.stderr)
        raise SystemExit(f"cannot load {module}")
    tests = json.loads(listing.stdout.strip().splitlines()[-1])
    return [t for t in tests if any(k in t for k in only)] if only else tests


def cached_reference(opts, module_sha):
    """torchrun's results from --reference_cache, when they are for this
    module and the same --keep_etcd; else {}."""
    try:
        with open(opts.reference_cache) as f:
            cached = json.load(f)
        if cached.get("module_sha") == module_sha and \
                cached.get("keep_etcd", False) == opts.keep_etcd:
            return cached["results"]
    except (OSError, ValueError, KeyError):
        pass
    return {}


def run_tests(module, tests, columns, reference, opts, log_dir):
    """Runs every test under every column's launcher, printing a line per
    test; returns {test: {column: result}}. With --reference, torchrun's
    results also go into `reference`."""
    results = {}
    for test in tests:
        results[test] = {}
        for col, cmd in columns:
            safe = re.sub(r"[^\w.-]", "_", test)
            results[test][col] = run_one(module, test, cmd, opts,
                                         os.path.join(log_dir, f"{safe}.{col}.log"))
        if opts.reference:
            reference[test] = results[test]["torchrun"]
        ref = reference.get(test, {}).get("status", "-")
        got = results[test]["launcher"]
        print(f"{test:60s} torchrun={ref:7s} cpptorchrun={got['status']:7s}"
              f" ({got['seconds']}s)", flush=True)
        for col in ("torchrun", "launcher"):
            r = results[test].get(col) or (reference.get(test) if col == "torchrun" else None)
            if r and r["status"] not in ("PASS", "SKIP"):
                name = "torchrun" if col == "torchrun" else "cpptorchrun"
                for line in describe(r, opts.verbose):
                    print(f"    {name}: {line}")
    return results


def print_regressions(tests, results, reference):
    """Prints the tests that pass under torchrun (or, without reference
    results, that do not skip) and fail under the launcher; returns 1 when
    there is one, else 0."""
    regressions = []
    for test in tests:
        got = results[test]["launcher"]["status"]
        ref = reference.get(test, {}).get("status")
        if got != "PASS" and (ref == "PASS" or (not reference and got != "SKIP")):
            regressions.append(test)
    print()
    if reference:
        both = sum(1 for t in tests if reference.get(t, {}).get("status") == "PASS")
        print(f"{both} pass against torchrun; {len(regressions)} of them fail against "
              f"the launcher" + (": " + ", ".join(regressions) if regressions else ""))
    else:
        print(f"no reference results: {len(regressions)} tests fail against the launcher")
    return 1 if regressions else 0


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--_torchrun_shim":
        return torchrun_shim(sys.argv[2:])
    if len(sys.argv) == 3 and sys.argv[1] == "--_list":
        print(json.dumps(list_tests(load_module(sys.argv[2], True))))
        return 0
    opts = parse_args()
    if opts._child:
        return child_main(opts)

    module = find_module(opts.pytorch_tests)
    with open(module, "rb") as f:
        module_sha = hashlib.sha1(f.read()).hexdigest()
    tests = list_module_tests(module, opts.only)

    log_dir = opts.log_dir or tempfile.mkdtemp(prefix="torch_launcher_tests-")
    os.makedirs(log_dir, exist_ok=True)
    launcher = os.path.abspath(opts.launcher) if os.path.exists(opts.launcher) else opts.launcher
    columns = []
    reference = {}
    if opts.reference:
        columns.append(("torchrun", reference_command(opts.reference_launcher)))
    else:
        reference = cached_reference(opts, module_sha)
    columns.append(("launcher", [launcher]))

    print(f"tests: {module} (sha1 {module_sha[:12]}), {len(tests)} tests")
    print(f"launcher: {launcher}; reference: "
          + (" ".join(columns[0][1]) if opts.reference else
             (f"cached ({opts.reference_cache})" if reference else "none")))
    print(f"logs: {log_dir}")
    results = run_tests(module, tests, columns, reference, opts, log_dir)
    if opts.reference:
        with open(opts.reference_cache, "w") as f:
            json.dump({"module": module, "module_sha": module_sha, "keep_etcd": opts.keep_etcd,
                       "results": {t: {k: v for k, v in r.items()}
                                   for t, r in reference.items()}}, f)
    return print_regressions(tests, results, reference)


if __name__ == "__main__":
    sys.exit(main() or 0)
