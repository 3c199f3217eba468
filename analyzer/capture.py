"""Capture every rank's flight-recorder buffers and where each rank is now, when a job hangs.

For training scripts. One line, before or after ``init_process_group``::

    import analyzer.capture  # with HANGSCOPE_CAPTURE_DIR=/shared/dumps in the environment

or, after ``init_process_group``::

    from analyzer import capture
    capture.install(dump_dir="/shared/dumps", timeout_s=300)

A daemon thread on every rank (the watcher) triggers a capture when

- no collective made progress on this rank for ``timeout_s`` seconds (its own deadline, for
  backends that never time out, and usually well before the backend's own timeout);
- an exception escapes the training loop or any thread (a timeout or a communication error
  that the script does not catch);
- the process receives ``SIGUSR1`` (``hangscope capture --signal PID...``), or the script
  calls :func:`trigger`.

The rank that triggers tells every rank through the job's c10d store (a counter under
``hangscope/capture/``); every rank then writes, into ``dump_dir``, one file per
flight-recorder buffer it holds, named ``<backend>_trace_rank_<rank>`` (``gloo``, ``nccl2``,
``nccl-lazy``, ``nccl``, ...; the backend is the ``profiling_name`` prefix of its entries),
and ``hangscope_context_rank_<rank>.json`` (schema ``hangscope.context/1``): every Python
thread's current stack, host name, pid, local rank, device, time, torch and backend versions.

It never hurts training: nothing raises out of it, it never blocks the training thread, the
store may go away (the watcher keeps its own connection, retries rarely, and captures locally
meanwhile), and each file is written to a temporary name and renamed. The flight recorder
must be on when the process groups are created: importing this module sets
``TORCH_FR_BUFFER_SIZE=2000`` when neither it nor ``TORCH_NCCL_TRACE_BUFFER_SIZE`` is set.

Importing :mod:`analyzer` does not import this module, and this module imports torch only
inside the watcher, once the script has imported it. One cost is paid up front: torch's stack
symbolizer imports ``torch._inductor`` on its first dump with stacks (one to three seconds
holding the GIL), so :func:`install` imports it at once when torch is loaded (before the
training loop, when called after ``init_process_group``), and the watcher does it as soon as
the process group exists otherwise. After that the watcher costs one look at the group
counters and one store round trip per poll (``timeout_s / 4``, at most a second).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from analyzer.context import CONTEXT_SCHEMA, context_name

ENV_DIR = "HANGSCOPE_CAPTURE_DIR"
ENV_TIMEOUT = "HANGSCOPE_CAPTURE_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
STORE_PREFIX = "hangscope/capture/"

#: Backend recorder names tried besides those of the job's groups (torch 2.15 keeps one
#: recorder per backend name; torch 2.13 has one, gloo's).
_KNOWN_BACKENDS = ("gloo", "nccl2", "nccl-lazy", "nccl", "nccl-legacy", "xccl", "ucc", "mpi", "c10d")


def dump_name(backend: str, rank: int) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in backend) or "c10d"
    return f"{safe}_trace_rank_{rank}"


def _log(msg: str) -> None:
    try:
        sys.stderr.write(f"[hangscope.capture pid {os.getpid()} {time.time():.3f}] {msg}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - stderr may be closed
        pass


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # Rename is atomic against a process killed mid-write (the realistic end of a hung
        # job); no fsync: it can take seconds on a busy shared file system.
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink(missing_ok=True)


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def _loads(data: bytes) -> Any:
    import io

    return _NoGlobals(io.BytesIO(data)).load()


# ------------------------------------------------------------------------------ stacks


def _frames(frame: FrameType | None, limit: int = 64) -> list[dict[str, Any]]:
    """A thread's Python stack, innermost frame first (the flight recorder's order)."""
    out = [{"name": fs.name, "filename": fs.filename, "line": fs.lineno or 0}
           for fs in traceback.extract_stack(frame, limit=None)]
    out.reverse()
    return out[:limit]


def thread_stacks(skip_ident: int | None = None) -> list[dict[str, Any]]:
    """Every Python thread's current stack, the main thread first."""
    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = []
    for ident, frame in frames.items():
        t = threads.get(ident)
        out.append({
            "name": t.name if t else f"thread-{ident}",
            "ident": ident,
            "native_id": getattr(t, "native_id", None) if t else None,
            "main": ident == main,
            "daemon": bool(t.daemon) if t else None,
            "capture": ident == skip_ident,
            "frames": _frames(frame),
        })
    out.sort(key=lambda d: (not d["main"], d["capture"], str(d["name"])))
    return out


# ------------------------------------------------------------------------------ torch side


def _torch_dist() -> Any | None:
    """torch.distributed, only when the script has imported it and a group exists."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # noqa: BLE001
        pass
    return None


def _backend_names(dist: Any) -> list[str]:
    names: list[str] = []
    try:
        for cfg in dist.distributed_c10d._world.pg_backend_config.values():
            for part in str(cfg).split(","):
                name = part.split(":", 1)[-1].strip()
                if name and name not in names:
                    names.append(name)
    except Exception:  # noqa: BLE001
        pass
    for name in _KNOWN_BACKENDS:
        if name not in names:
            names.append(name)
    return names


def _dump_buffers(dist: Any, *, entries: bool) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """Every flight-recorder buffer of this process: {backend: (pickle bytes, parsed)}.

    The backend of a buffer is the ``profiling_name`` prefix of its entries (the name it was
    asked for when it holds none). Buffers with neither entries nor group counters are left
    out, and so is a second copy of a buffer already seen under another name.
    """
    from torch._C import _distributed_c10d as c10d

    dump = getattr(c10d, "_dump_fr_trace", None)
    out: dict[str, tuple[bytes, dict[str, Any]]] = {}
    seen: set[bytes] = set()
    calls: list[tuple[str, Callable[[], bytes]]] = []
    if dump is not None:
        try:
            dump(includeCollectives=False, includeStackTraces=False, onlyActive=False,
                 backend="gloo")
            per_backend = True
        except TypeError:  # torch < 2.15: one recorder
            per_backend = False
        except Exception:  # noqa: BLE001
            per_backend = True
        if per_backend:
            for name in _backend_names(dist):
                calls.append((name, lambda n=name: dump(includeCollectives=entries,
                                                        includeStackTraces=entries,
                                                        onlyActive=False, backend=n)))
        else:
            calls.append(("gloo", lambda: dump(includeCollectives=entries,
                                               includeStackTraces=entries, onlyActive=False)))
    legacy = getattr(c10d, "_dump_nccl_trace", None)
    if legacy is not None:
        calls.append(("nccl", lambda: legacy(includeCollectives=entries,
                                             includeStackTraces=entries, onlyActive=False)))
    for asked, call in calls:
        try:
            data = call()
            obj = _loads(data)
        except Exception:  # noqa: BLE001 - no such recorder, or no NCCL in this build
            continue
        if not isinstance(obj, dict) or not (obj.get("entries") or obj.get("pg_status")):
            continue
        if data in seen:
            continue
        seen.add(data)
        backend = asked
        for e in obj.get("entries") or []:
            pn = e.get("profiling_name") if isinstance(e, dict) else None
            if isinstance(pn, str) and ":" in pn:
                backend = pn.split(":", 1)[0]
                break
        if backend in out:
            backend = asked if asked not in out else f"{backend}-{asked}"
        out[backend] = (data, obj)
    return out


def _progress_signature(dist: Any) -> tuple[Any, ...]:
    """The group counters of every buffer: any change means a collective moved."""
    sig = []
    for backend, (_data, obj) in sorted(_dump_buffers(dist, entries=False).items()):
        for key, st in sorted((obj.get("pg_status") or {}).items(), key=lambda kv: str(kv[0])):
            if isinstance(st, dict):
                sig.append((backend, str(key), str(st.get("last_enqueued_collective")),
                            str(st.get("last_completed_collective"))))
    return tuple(sig)


def _enqueued_any(sig: tuple[Any, ...]) -> bool:
    for _b, _k, enq, _done in sig:
        try:
            if int(enq) >= 0:
                return True
        except ValueError:
            continue
    return False


def _versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    torch = sys.modules.get("torch")
    if torch is None:
        return out
    out["torch"] = str(getattr(torch, "__version__", ""))
    try:
        out["cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        pass
    return out


def _device() -> str:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return f"cuda:{torch.cuda.current_device()}"
    except Exception:  # noqa: BLE001
        pass
    return "cpu"


# ------------------------------------------------------------------------------ store


class _Store:
    """The watcher's own connection to the job's c10d store; every call may fail."""

    def __init__(self, dist: Any, store: Any | None, retry_s: float = 10.0) -> None:
        self.dist = dist
        self.given = store
        self.retry_s = retry_s
        self.store: Any | None = None
        self.next_try = 0.0
        self.addr: tuple[str, int] | None = None
        self.failures = 0

    def _connect(self) -> Any | None:
        from datetime import timedelta

        dist = self.dist
        base = self.given
        if base is None:
            base = dist.distributed_c10d._get_default_store()
        # Unwrap PrefixStores to the TCPStore: a separate client connection never shares a
        # lock (or a blocked request) with the training thread.
        inner = base
        while hasattr(inner, "underlying_store"):
            inner = inner.underlying_store
        if isinstance(inner, dist.TCPStore):
            self.addr = (inner.host, inner.port)
            inner = dist.TCPStore(inner.host, inner.port, is_master=False,
                                  timeout=timedelta(seconds=5), wait_for_workers=False)
        return dist.PrefixStore(STORE_PREFIX, inner)

    def get(self) -> Any | None:
        if self.store is None and time.monotonic() >= self.next_try:
            try:
                self.store = self._connect()
            except Exception as exc:  # noqa: BLE001
                self._down(exc)
        return self.store

    def _down(self, exc: BaseException) -> None:
        if self.failures == 0:
            _log(f"store unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}); "
                 "capturing locally, retrying now and then")
        self.failures += 1
        self.store = None
        self.next_try = time.monotonic() + self.retry_s

    def call(self, fn: Callable[[Any], Any]) -> Any | None:
        st = self.get()
        if st is None:
            return None
        try:
            return fn(st)
        except Exception as exc:  # noqa: BLE001
            self._down(exc)
            return None


# ------------------------------------------------------------------------------ watcher


@dataclass
class Capture:
    """The watcher of one process (see the module docstring)."""

    dump_dir: Path
    timeout_s: float = DEFAULT_TIMEOUT_S
    poll_s: float = 1.0
    grace_s: float = 10.0
    store: Any | None = None
    captures: int = 0
    polls: int = 0
    cpu_s: float = 0.0  # the watcher thread's CPU time so far, and at the end of its warm-up
    cpu0_s: float = 0.0
    last_files: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _requests: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done: threading.Condition = field(default_factory=threading.Condition)
    _wake_r: socket.socket | None = None
    _signum: int | None = None

    # -- public
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hangscope-capture", daemon=True)
            self._thread.start()

    def stop(self, wait_s: float = 0.0) -> None:
        """Stop the watcher; wait up to ``wait_s`` for it to leave what it is doing."""
        self._stop.set()
        self._wake()
        if wait_s > 0 and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait_s)

    def request(self, reason: str, wait_s: float = 0.0) -> bool:
        """Ask every rank to capture; optionally wait for this rank's files. Never raises."""
        try:
            with self._done:
                before = self.captures
                with self._lock:
                    self._requests.append(reason)
                self._wake()
                if wait_s > 0 and threading.current_thread() is not self._thread:
                    self._done.wait_for(lambda: self.captures > before, timeout=wait_s)
                return self.captures > before
        except Exception:  # noqa: BLE001
            return False

    # -- internals
    def _wake(self) -> None:
        if self._wake_r is not None and _WAKE_W is not None:
            try:
                _WAKE_W.send(b"\0")
            except Exception:  # noqa: BLE001
                pass

    def _sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when SIGUSR1 arrived meanwhile."""
        if self._wake_r is None:
            self._stop.wait(seconds)
            return False
        import select

        got = False
        try:
            ready, _, _ = select.select([self._wake_r], [], [], seconds)
            if ready:
                data = self._wake_r.recv(4096)
                got = self._signum is not None and self._signum in data
        except Exception:  # noqa: BLE001
            self._stop.wait(min(seconds, 0.1))
        return got

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - never let the watcher die loudly
            _log(f"watcher stopped: {type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        dist = None
        while dist is None and not self._stop.is_set():
            dist = _torch_dist()
            if dist is None:
                if self._sleep(min(self.poll_s, 0.2)):  # no group, no store: this process alone
                    self._capture_local(None, {"reason": "signal SIGUSR1 (no process group yet)",
                                               "by_rank": _int_env("RANK"), "time_ns": time.time_ns()})
        if dist is None:
            return
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        _warm_up()  # a no-op when install() did it
        self.cpu0_s = time.thread_time()
        store = _Store(dist, self.store)
        seen = store.call(lambda s: s.add("generation", 0)) or 0
        last_sig: tuple[Any, ...] = ()
        last_change = time.monotonic()
        armed = True
        last_end_ns = 0
        while not self._stop.is_set():
            self.cpu_s = time.thread_time()  # the watcher's own CPU time so far (benchmark)
            self.polls += 1
            signalled = self._sleep(self.poll_s)
            with self._lock:
                reasons, self._requests = self._requests, []
            if signalled:
                reasons.append("signal SIGUSR1")
            now = time.monotonic()
            try:
                sig = _progress_signature(dist)
            except Exception:  # noqa: BLE001
                sig = last_sig
            if sig != last_sig:
                last_sig, last_change, armed = sig, now, True
            elif armed and _enqueued_any(sig) and now - last_change >= self.timeout_s:
                armed = False
                reasons.append(f"deadline: no collective progressed for {now - last_change:.1f} s")
            gen = store.call(lambda s: s.add("generation", 0))
            if reasons:
                if gen is not None and gen > seen:
                    pass  # another rank asked meanwhile: answer that request
                else:
                    info = {"reason": reasons[0], "by_rank": self.rank, "time_ns": time.time_ns()}
                    new = store.call(lambda s: self._publish(s, info))
                    if new is None:  # no store: this rank alone
                        self._capture_local(None, info)
                        continue
                    gen = new
            if gen is not None and gen > seen:
                time.sleep(0.05)  # let simultaneous requests coalesce into one capture
                gen = store.call(lambda s: s.add("generation", 0)) or gen
                info = store.call(lambda s: json.loads(s.get(f"reason/{gen}"))) or {}
                # A request made before this rank's last capture ended is answered by it
                # (several ranks reach their deadline at about the same time).
                if int(info.get("time_ns") or 0) > last_end_ns or info.get("by_rank") == self.rank:
                    self._capture_local(gen, info)
                    last_end_ns = time.time_ns()
                seen = gen
                store.call(lambda s: s.add(f"done/{gen}", 1))

    @staticmethod
    def _publish(s: Any, info: dict[str, Any]) -> int:
        gen = int(s.add("generation", 1))
        s.set(f"reason/{gen}", json.dumps(info))
        return gen

    def _capture_local(self, gen: int | None, info: dict[str, Any]) -> None:
        try:
            self._write(gen, info)
        except Exception as exc:  # noqa: BLE001
            _log(f"capture failed: {type(exc).__name__}: {exc}")
        with self._done:
            self.captures += 1
            self._done.notify_all()

    def _write(self, gen: int | None, info: dict[str, Any]) -> None:
        dist = _torch_dist()
        rank = getattr(self, "rank", int(os.environ.get("RANK", "-1") or -1))
        # The stacks first: what the threads are doing now, before dumping moves anything.
        threads = thread_stacks(skip_ident=threading.get_ident())
        now_ns = time.time_ns()
        written: list[dict[str, Any]] = []
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        if dist is not None:
            for backend, (data, obj) in sorted(_dump_buffers(dist, entries=True).items()):
                path = self.dump_dir / dump_name(backend, rank)
                _write_atomic(path, data)
                written.append({"backend": backend, "file": path.name,
                                "entries": len(obj.get("entries") or []),
                                "comm_lib_version": str(obj.get("comm_lib_version")
                                                        or obj.get("nccl_version") or "")})
        ctx = {
            "schema": CONTEXT_SCHEMA,
            "rank": rank,
            "world_size": getattr(self, "world", None),
            "local_rank": _int_env("LOCAL_RANK"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "device": _device(),
            "time_ns": now_ns,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ns / 1e9)),
            "trigger": {"generation": gen, "reason": str(info.get("reason", "")),
                        "by_rank": info.get("by_rank"), "time_ns": info.get("time_ns")},
            "versions": _versions(),
            "dumps": written,
            "threads": threads,
        }
        _write_atomic(self.dump_dir / context_name(rank), json.dumps(ctx, indent=1).encode())
        self.last_files = [w["file"] for w in written] + [context_name(rank)]
        _log(f"rank {rank}: captured {', '.join(self.last_files)} "
             f"({ctx['trigger']['reason'] or 'on request'})")


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


# ------------------------------------------------------------------------------ install

_CURRENT: Capture | None = None
_WAKE_W: socket.socket | None = None
_WAKE_R: socket.socket | None = None
_SIGNUM: int | None = None


def _setup_signal(signum: int) -> None:
    """SIGUSR1 wakes the watcher even when the main thread is stuck in C code: the C-level
    handler writes the signal number to a wakeup socket the watcher selects on."""
    global _WAKE_W, _WAKE_R, _SIGNUM
    if _WAKE_W is not None or threading.current_thread() is not threading.main_thread():
        return
    try:
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        old = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        if old != -1:  # the program uses its own wakeup fd (asyncio): leave it alone
            signal.set_wakeup_fd(old)
            r.close()
            w.close()
            return
        prev = signal.getsignal(signum)

        def handler(num: int, frame: FrameType | None) -> None:
            if callable(prev):
                prev(num, frame)

        signal.signal(signum, handler)
        _WAKE_R, _WAKE_W, _SIGNUM = r, w, signum
    except Exception as exc:  # noqa: BLE001
        _log(f"no signal trigger: {type(exc).__name__}: {exc}")


def _hook_exceptions(cap: Capture) -> None:
    prev_sys = sys.excepthook
    prev_thr = threading.excepthook

    def sys_hook(tp: type[BaseException], val: BaseException, tb: TracebackType | None) -> None:
        if not issubclass(tp, (KeyboardInterrupt, SystemExit)):
            cap.request(f"exception: {tp.__name__}: {str(val).splitlines()[0][:200] if str(val) else ''}",
                        wait_s=cap.grace_s)
        prev_sys(tp, val, tb)

    def thr_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit and args.thread is not cap._thread:
            cap.request(f"exception in thread {getattr(args.thread, 'name', '?')}: "
                        f"{args.exc_type.__name__}", wait_s=0)
        prev_thr(args)

    sys.excepthook = sys_hook
    threading.excepthook = thr_hook


def _warm_up() -> None:
    """Import what torch's stack symbolizer imports on the first dump with stacks
    (``torch._inductor``: seconds of imports holding the GIL), now rather than at hang time.
    Only once torch is imported by the script."""
    if "torch" not in sys.modules or "torch._inductor" in sys.modules:
        return
    try:
        import importlib

        importlib.import_module("torch._inductor")
    except Exception:  # noqa: BLE001
        pass


def _fr_on() -> None:
    if not os.environ.get("TORCH_FR_BUFFER_SIZE") and not os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"


def install(dump_dir: str | os.PathLike[str] | None = None, timeout_s: float | None = None, *,
            poll_s: float | None = None, store: Any | None = None,
            grace_s: float = 10.0) -> Capture | None:
    """Start the watcher of this process (once; later calls return the same one).

    ``dump_dir`` defaults to ``$HANGSCOPE_CAPTURE_DIR``; ``timeout_s`` (the watcher's own
    deadline) to ``$HANGSCOPE_CAPTURE_TIMEOUT`` or 300 s; ``store`` to the job's default
    c10d store. May be called before ``init_process_group`` (the watcher waits for it).
    Returns None (and logs why) instead of raising.
    """
    global _CURRENT
    try:
        if _CURRENT is not None:
            return _CURRENT
        where = dump_dir if dump_dir is not None else os.environ.get(ENV_DIR)
        if not where:
            _log(f"no dump_dir and no {ENV_DIR}: capture not installed")
            return None
        if timeout_s is None:
            timeout_s = float(os.environ.get(ENV_TIMEOUT) or DEFAULT_TIMEOUT_S)
        poll = poll_s if poll_s is not None else max(0.05, min(1.0, timeout_s / 4))
        _fr_on()
        _setup_signal(signal.SIGUSR1)
        cap = Capture(dump_dir=Path(where), timeout_s=float(timeout_s), poll_s=poll,
                      grace_s=grace_s, store=store, _wake_r=_WAKE_R, _signum=_SIGNUM)
        _hook_exceptions(cap)
        # At exit, let the watcher leave any torch call before the interpreter tears down
        # (a daemon thread inside a store or recorder call then can abort the process).
        import atexit

        atexit.register(cap.stop, 2.0)
        if threading.current_thread() is threading.main_thread():
            _warm_up()  # before the training loop starts, when called after init_process_group
        cap.start()
        _CURRENT = cap
        return cap
    except Exception as exc:  # noqa: BLE001
        _log(f"capture not installed: {type(exc).__name__}: {exc}")
        return None


def trigger(reason: str = "requested by the script", wait_s: float = 0.0) -> bool:
    """Ask every rank to capture now (no-op without :func:`install`). Never raises."""
    return _CURRENT.request(reason, wait_s=wait_s) if _CURRENT is not None else False


def current() -> Capture | None:
    return _CURRENT


if os.environ.get(ENV_DIR):
    install()

__all__ = [
    "CONTEXT_SCHEMA",
    "ENV_DIR",
    "ENV_TIMEOUT",
    "Capture",
    "context_name",
    "current",
    "dump_name",
    "install",
    "thread_stacks",
    "trigger",
]
