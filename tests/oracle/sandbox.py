"""A fork server that runs readers on cases, each in a child of its own.

The server imports every reader once (``python -m oracle.sandbox`` with the job
modules to load), then for each (case, job) forks a child that starts a new
session, caps its resources, works in a fresh empty folder (its ``HOME`` and
``TMPDIR`` too) and runs the job. The server bounds the child's wall-clock time
(killing its whole process group), then looks for ``tensorplay_pwned_marker`` in
that folder and removes it. The campaign talks to the server through pipes
(``Sandbox``): a reader that corrupts or kills the server costs one restart.

Wire format, both ways: a 4-byte little-endian length, then JSON.
"""
from __future__ import annotations

import importlib
import json
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

MARKER = "tensorplay_pwned_marker"
ALL = "all"  # a server that holds every job
RESULT_LIMIT = 48 * 1024  # the child's result must fit the pipe's buffer: it writes before exiting
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Outcome:
    """What one job did: ``status`` is ok, raised, crashed or timeout; ``fired``
    whether the marker appeared; ``where`` the file of a folder it appeared after."""

    status: str
    fired: bool
    exc: str = ""
    message: str = ""
    result: object = None
    where: str = ""
    seconds: float = 0.0

    @classmethod
    def from_json(cls, d: dict) -> Outcome:
        return cls(**d)


# --- the server side -----------------------------------------------------------------

def _send(f, obj: object) -> None:
    data = json.dumps(obj).encode()
    f.write(struct.pack("<I", len(data)) + data)
    f.flush()


def _receive(f) -> object | None:
    head = f.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    data = f.read(n)
    return json.loads(data) if len(data) == n else None


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Server:
    """Runs the jobs of one group (readers.LIGHT_GROUP or TORCH_GROUP, or ALL) that
    the modules list: ``READERS`` (``readers.Reader``) and ``JOBS`` (name: (function,
    group), functions that take folders themselves and return a result)."""

    def __init__(self, group: str, modules: list[str], extra_gib: float, cpu_seconds: int):
        self.jobs: dict[str, object] = {}
        self.folder_jobs: set[str] = set()
        self.catalog: list[dict] = []
        for name in modules:
            module = importlib.import_module(name)
            for wanted, names in getattr(module, "IMPORTS", {}).items():
                if group in (wanted, ALL):
                    for module_name in names:
                        importlib.import_module(module_name)
            for job in getattr(module, "READERS", []):
                if group not in (job.group, ALL):
                    continue
                for module_name in job.imports:
                    importlib.import_module(module_name)
                self.jobs[job.name] = job.read
                if job.folder:
                    self.folder_jobs.add(job.name)
                self.catalog.append({"name": job.name, "runs": job.runs, "kinds": sorted(job.kinds),
                                     "folder": job.folder, "stands_for": job.stands_for, "group": job.group})
            for job_name, (fn, job_group) in getattr(module, "JOBS", {}).items():
                if group in (job_group, ALL):
                    self.jobs[job_name] = fn
                    self.folder_jobs.add(job_name)
                    self.catalog.append({"name": job_name, "group": job_group, "subject": True, "kinds": [],
                                         "folder": True, "stands_for": ""})
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # before any fork: a child must not inherit a busy pool
        self.address_space = _vm_size() + int(extra_gib * (1 << 30))
        self.cpu_seconds = cpu_seconds
        self.base = tempfile.mkdtemp(prefix="oracle-markers-")
        import gc

        gc.collect()
        gc.freeze()  # fewer pages copied on write in each child

    def serve(self, rx, tx) -> None:
        _send(tx, {"pid": os.getpid(), "address_space": self.address_space, "readers": self.catalog})
        while True:
            request = _receive(rx)
            if request is None:
                break
            outcomes = [self.run(request["path"], request["folder"], job, request["timeout"])
                        for job in request["jobs"]]
            _send(tx, [vars(o) for o in outcomes])
        shutil.rmtree(self.base, ignore_errors=True)

    def run(self, path: str, folder: bool, job: str, timeout: float) -> Outcome:
        where = tempfile.mkdtemp(dir=self.base)
        rfd, wfd = os.pipe()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child never returns
            os.close(rfd)
            self._child(path, folder, job, where, wfd)
        os.close(wfd)
        pidfd = os.pidfd_open(pid)
        chunks: list[bytes] = []
        timed_out = False
        try:
            deadline = started + timeout
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.register(rfd, select.POLLIN)
            done = False
            while not done:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for fd, _ in poller.poll(left * 1000):
                    if fd == rfd:
                        chunk = os.read(rfd, 65536)
                        if chunk:
                            chunks.append(chunk)
                        else:
                            poller.unregister(rfd)
                    else:
                        done = True
        finally:
            try:
                os.killpg(pid, signal.SIGKILL)  # strays too: whatever the payload started
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            os.close(pidfd)
            while True:
                try:
                    chunk = os.read(rfd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(rfd)
        seconds = time.monotonic() - started
        fired = os.path.lexists(os.path.join(where, MARKER))
        shutil.rmtree(where, ignore_errors=True)
        if timed_out:
            return Outcome("timeout", fired, seconds=seconds)
        if os.WIFSIGNALED(status):
            return Outcome("crashed", fired, exc=signal.Signals(os.WTERMSIG(status)).name, seconds=seconds)
        try:
            reported = json.loads(b"".join(chunks))
        except ValueError:
            return Outcome("crashed", fired, exc=f"exit status {os.WEXITSTATUS(status)}", seconds=seconds)
        return Outcome(reported.get("status", "crashed"), fired or reported.get("fired", False),
                       reported.get("exc", ""), reported.get("message", ""), reported.get("result"),
                       reported.get("where", ""), seconds)

    def _child(self, path: str, folder: bool, job: str, where: str, wfd: int) -> None:
        code = 70
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            limits = ((resource.RLIMIT_AS, self.address_space), (resource.RLIMIT_CPU, self.cpu_seconds),
                      (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_FSIZE, 1 << 30), (resource.RLIMIT_CORE, 0))
            for which, soft in limits:
                resource.setrlimit(which, (soft, soft))
            os.chdir(where)
            os.environ["HOME"] = os.environ["TMPDIR"] = where
            tempfile.tempdir = where
            import warnings

            warnings.simplefilter("ignore")
            report = self._call(path, folder, job, where)
            self._reap()
            data = json.dumps(report, default=repr).encode()
            if len(data) > RESULT_LIMIT:
                report["result"] = "<too long>"
                data = json.dumps(report, default=repr).encode()[:RESULT_LIMIT]
            os.write(wfd, data)
            code = 0
        except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
            code = 71
        finally:
            os._exit(code)

    def _call(self, path: str, folder: bool, job: str, where: str) -> dict:
        fn = self.jobs[job]
        if folder and job not in self.folder_jobs:
            return self._each_file(fn, path, where)
        try:
            result = fn(path)
        except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: a payload may raise them
            return {"status": "raised", "exc": _name(e), "message": _message(e)}
        return {"status": "ok", "result": result}

    @staticmethod
    def _each_file(fn, folder: str, where: str) -> dict:
        """A file reader on a folder: every file in it, in order, until the marker appears.
        Not git's own objects: a program reaches those only through a pointer, which
        the folder readers follow."""
        first: dict | None = None
        for root, dirs, names in os.walk(folder):
            if ".git" in dirs:
                dirs.remove(".git")
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                try:
                    fn(full)
                except BaseException as e:  # noqa: BLE001
                    first = first or {"status": "raised", "exc": _name(e), "message": _message(e)}
                if os.path.lexists(os.path.join(where, MARKER)):
                    return {"status": "ok", "fired": True, "where": os.path.relpath(full, folder)}
        return first or {"status": "ok"}

    @staticmethod
    def _reap() -> None:
        """Wait for what the job started (a Popen'd ``touch``) before the marker is looked for."""
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            except InterruptedError:
                continue


def _name(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__qualname__}"


def _message(e: BaseException) -> str:
    try:
        return str(e)[:300]
    except Exception:  # noqa: BLE001 - a payload's exception may not print
        return "<unprintable>"


def serve_main(argv: list[str]) -> None:
    config = json.loads(argv[0])
    server = Server(config["group"], config["modules"], config["extra_gib"], config["cpu_seconds"])
    rx, tx = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the protocol's pipe: stray prints go to stderr.
    sys.stdout = sys.stderr
    server.serve(rx, tx)


# --- the campaign's side -----------------------------------------------------------------

class SandboxError(RuntimeError):
    pass


class _Server:
    """One fork server process, seen from the campaign."""

    def __init__(self, config: dict):
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.catalog: list[dict] = []

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen([sys.executable, "-m", "oracle.sandbox", json.dumps(self.config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=TESTS, env=env)
        hello = self.read(300.0)
        if not isinstance(hello, dict):
            self.kill()
            raise SandboxError(f"the {self.config['group']} fork server did not start")
        self.catalog = hello["readers"]

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
            self.proc = None

    def send(self, request: dict) -> bool:
        if self.proc is None:
            self.start()
        try:
            _send(self.proc.stdin, request)
            return True
        except OSError:
            return False

    def read(self, timeout: float) -> object | None:
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            return None
        try:
            return _receive(self.proc.stdout)
        except (OSError, ValueError):
            return None


class Sandbox:
    """The fork servers, seen from the campaign: one without torch, two with
    everything. ``run`` sends a case's jobs to servers that hold them (which work
    at once, one core each) and gathers the outcomes: torch's jobs to a torch
    server, the others to the light one, unless the case ``needs_torch`` (a
    folder, or bytes naming torch: unpickling those imports torch, seconds in a
    child of the light server), when its jobs are split between the two torch
    servers. A server that dies or stops answering is restarted, and its part of
    the request retried once."""

    def __init__(self, modules: tuple[str, ...] = ("oracle.readers", "oracle.subject"), timeout: float = 10.0,
                 extra_gib: float = 3.0, cpu_seconds: int = 20):
        from .readers import LIGHT_GROUP, TORCH_GROUP

        self.timeout = timeout
        self.servers = {name: _Server({"group": group, "modules": list(modules), "extra_gib": extra_gib,
                                       "cpu_seconds": cpu_seconds})
                        for name, group in ((LIGHT_GROUP, LIGHT_GROUP), (TORCH_GROUP, ALL), ("torch-2", ALL))}
        self.routes: dict[str, str] = {}
        self.catalog: list[dict] = []
        self.restarts = 0

    def start(self) -> None:
        for server in self.servers.values():
            server.start()
        self._route()

    def _route(self) -> None:
        # Every job once, by the group it belongs to (the ALL servers list every job).
        by_name = {}
        for server in self.servers.values():
            for entry in server.catalog:
                by_name.setdefault(entry["name"], entry)
        self.catalog = list(by_name.values())
        self.routes = {entry["name"]: entry["group"] for entry in self.catalog}

    def close(self) -> None:
        for server in self.servers.values():
            server.close()

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, path: str, folder: bool, jobs: list[str], timeout: float | None = None,
            needs_torch: bool = False) -> dict[str, Outcome]:
        timeout = timeout or self.timeout
        by_group: dict[str, list[str]] = {}
        for i, job in enumerate(jobs):
            server = ("torch", "torch-2")[i % 2] if needs_torch else self.routes.get(job, "light")
            by_group.setdefault(server, []).append(job)
        outcomes: dict[str, Outcome] = {}
        pending = dict(by_group)
        for _ in range(2):
            sent = {}
            for group, names in pending.items():
                request = {"path": os.path.abspath(path), "folder": folder, "jobs": names, "timeout": timeout}
                sent[group] = self.servers[group].send(request)
            for group, names in list(pending.items()):
                server = self.servers[group]
                reply = server.read(len(names) * (timeout + 5) + 30) if sent[group] else None
                if isinstance(reply, list) and len(reply) == len(names):
                    outcomes.update({job: Outcome.from_json(o) for job, o in zip(names, reply)})
                    del pending[group]
                else:
                    self.restarts += 1
                    server.kill()
            if not pending:
                break
        for names in pending.values():
            outcomes.update({job: Outcome("crashed", False, exc="the fork server died") for job in names})
        return {job: outcomes[job] for job in jobs}


if __name__ == "__main__":
    serve_main(sys.argv[1:])
