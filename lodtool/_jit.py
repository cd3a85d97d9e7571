"""The one Numba entry of lodtool: the kernel decorator, ``prange``, atomics and block scheduling.

Numba is imported on a kernel's first call, never at import, so a module full
of kernels costs nothing until one runs.  Every compiled function of lodtool
(the operators, the JSON scanner, the Fletcher-32 checksum, the monotonicity
check) is declared here the same way::

    from lodtool._jit import kernel, prange

    @kernel(parallel=True)
    def _fill(out):
        for i in prange(out.shape[0]):
            out[i] = i

:func:`kernel` compiles with ``numba.njit(cache=True, nogil=True, **options)``;
inside a kernel ``prange`` is ``numba.prange``,
other kernels may be called by name, and an :func:`intrinsic` is compiled with
Numba's ``numba.extending.intrinsic``.  A parallel loop over items is written
as the work of one block of them, :func:`parallel_blocks`: the loop around it
(worker threads taking blocks from a shared counter) lives here, once.

>>> @kernel
... def _twice(a, out):
...     for i in range(a.shape[0]):
...         out[i] = 2 * a[i]
>>> _twice  # doctest: +ELLIPSIS
<lodtool kernel _twice (not compiled yet)>
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections.abc import Callable

import numpy as np

from .errors import LodBackendError

#: ``for i in prange(n)`` in a kernel: plain ``range`` until the kernel is compiled,
#: where :func:`kernel` swaps in ``numba.prange``.
prange = range

_numba_module = None
_numba_error: str | None = None
#: Numba's workqueue threading layer aborts the process on concurrent parallel
#: launches; parallel kernels therefore run one at a time (each already uses every core).
_PARALLEL_LOCK = threading.Lock()


#: environment variables that bound lodtool's threads, the first one set wins: lodtool's own, then Numba's
THREAD_LIMITS = ("LODTOOL_NUM_THREADS", "NUMBA_NUM_THREADS")


def thread_limit() -> int:
    """Threads lodtool runs at most in this process, capped at the cores it may run on: the first of
    :data:`THREAD_LIMITS` that is set (a positive integer), else, inside a Dask worker, the worker's
    threads (so N single-thread workers use N cores), else every core.  Nothing is imported.

    ``OMP_NUM_THREADS`` is not read: libraries set it as they are imported
    (``import paddle`` sets it to 1), which would make lodtool single-threaded
    behind the user's back.

    >>> 1 <= thread_limit() <= (os.cpu_count() or 1)
    True
    """
    try:
        cores = max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        cores = max(os.cpu_count() or 1, 1)
    for name in THREAD_LIMITS:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return min(int(value), cores)
    worker = _dask_worker_threads()
    return min(worker, cores) if worker else cores


def _dask_worker_threads() -> int | None:
    """The threads of the Dask worker running this code, or ``None`` outside one (distributed not imported)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        worker = distributed.get_worker()
    except (ValueError, AttributeError):  # not in a worker's task
        return None
    state = getattr(worker, "state", worker)
    threads = getattr(state, "nthreads", None)
    return int(threads) if isinstance(threads, int) and threads > 0 else None


def numba_module():
    """Import Numba on first use; a clear :class:`LodBackendError` if it is missing.

    Numba's thread pool follows :func:`thread_limit` where Numba is imported here
    (in a single-thread Dask worker: kernels of one thread, as ``NUMBA_NUM_THREADS=1``).
    """
    global _numba_module, _numba_error
    if _numba_module is None:
        if _numba_error is not None:
            raise LodBackendError(_numba_error)
        if "numba" not in sys.modules and not os.environ.get("NUMBA_NUM_THREADS"):
            limit = thread_limit()
            if limit < (os.cpu_count() or 1):
                os.environ["NUMBA_NUM_THREADS"] = str(limit)  # read once, when Numba is imported
        try:
            import numba
        except Exception as exc:  # pragma: no cover - numba is a dependency
            _numba_error = f"backend='numba' needs Numba, which failed to import ({exc}); use backend='numpy'"
            raise LodBackendError(_numba_error) from None
        _numba_module = numba
    return _numba_module


def _deferring_extensions(compile_):
    """``compile_`` (a dispatcher's ``_compile_for_args``) run without loading other packages' Numba extensions.

    Numba loads every installed ``numba_extensions`` entry point (awkward
    registers one) when it refreshes its CPU context, before each compile and
    cache load: 0.24 s on a machine with awkward, paid by every kernel command,
    for types lodtool's kernels never use.  lodtool's dispatchers therefore
    compile with the entry points marked as loaded; the first compile of anyone
    else's code in the process still loads them, as Numba does.
    """
    try:
        from numba.core import entrypoints
    except ImportError:  # pragma: no cover - another Numba layout: keep its behaviour
        return compile_

    def compile(*args, **kwargs):
        if getattr(entrypoints, "_already_initialized", True):
            return compile_(*args, **kwargs)
        entrypoints._already_initialized = True
        try:
            return compile_(*args, **kwargs)
        finally:
            entrypoints._already_initialized = False

    return compile


def _njit(func: Callable, options: dict):
    """``numba.njit(cache=True, nogil=True, **options)(func)``, compiling without other packages' extensions
    (under ``NUMBA_DISABLE_JIT``, ``func`` itself: it runs as Python)."""
    numba = numba_module()
    dispatcher = numba.njit(cache=True, nogil=True, **options)(func)
    if not numba.config.DISABLE_JIT:
        dispatcher._compile_for_args = _deferring_extensions(dispatcher._compile_for_args)
    return dispatcher


def numba_loaded() -> bool:
    """Whether Numba is imported in this process already (so a kernel no longer pays for the import).

    >>> numba_loaded() in (True, False)
    True
    """
    return _numba_module is not None or "numba" in sys.modules


def kernels_pay(work: int | None, cold: int, warm: int) -> bool:
    """Whether ``work`` is large enough for compiled kernels: the one rule of lodtool's work-size tiers.

    Below ``cold`` while Numba is not imported, or below ``warm`` once it is, a
    NumPy or pure-Python path runs instead and Numba stays unimported: its import
    plus the loading of cached kernels costs about a second that small work never
    wins back.  Each caller measures its own crossovers (see the constants beside
    the callers): ``cold`` is the work whose slow path costs what Numba's first
    call costs.  The work turned away is counted, as a fraction of each caller's
    ``cold``: once the slow paths of a long-lived process (a notebook, a
    training loop) have spent one first-call cost in all, Numba pays and is
    loaded (the ski-rental rule: never more than twice the better choice made
    in hindsight).  ``work=None`` (unknown) means yes.

    >>> kernels_pay(None, 100, 10), kernels_pay(10 ** 9, 100, 10)
    (True, True)
    """
    global _slow_spent
    if work is None:
        return True
    work = int(work)
    if numba_loaded():
        return work >= warm
    share = work / max(int(cold), 1)
    if share >= 1.0 or _slow_spent + share >= 1.0:
        return True
    _slow_spent += share
    return False


#: the slow-path work :func:`kernels_pay` has turned away in this process, in first-call costs of Numba
_slow_spent = 0.0


def atomic_add(counter, value):
    """``old = counter[0]; counter[0] += value; return old``, atomically in a compiled kernel.

    Parallel kernels hand out blocks of work through it (dynamic scheduling):
    Numba's OpenMP layer splits a ``prange`` statically, so a thread that shares
    its core with another process would hold up the whole kernel; with blocks
    taken from a counter, the other threads take over its share.  This is the
    plain-Python stand-in (for ``NUMBA_DISABLE_JIT``); :func:`kernel` swaps in an
    LLVM ``atomicrmw add``.

    >>> import numpy as np
    >>> c = np.zeros(1, np.uint64)
    >>> int(atomic_add(c, 3)), int(atomic_add(c, 4)), c.tolist()
    (0, 3, [7])
    """
    old = counter[0]
    counter[0] += value
    return old


#: the unsigned 1 of block and item counters
ONE = np.uint64(1)


def workers() -> int:
    """Threads a parallel kernel runs on (Numba's current setting)."""
    return int(numba_module().get_num_threads())


def block_count(n: int, per_worker: int = 16) -> int:
    """How many blocks ``n`` items are handed out in: ``per_worker`` for each worker thread, at most one an item.

    >>> block_count(0), block_count(1), 1 <= block_count(10 ** 9) <= 16 * workers()
    (1, 1, True)
    """
    return max(1, min(int(n), workers() * per_worker))


class LazyIntrinsic:
    """A Numba intrinsic (``numba.extending.intrinsic``) made on a calling kernel's compilation."""

    def __init__(self, fn: Callable):
        self.py_func = fn
        self._compiled = None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    @property
    def compiled(self):
        if self._compiled is None:
            numba_module()
            from numba.extending import intrinsic as make

            self._compiled = make(self.py_func)
        return self._compiled

    def __repr__(self) -> str:
        return f"<lodtool intrinsic {self.__name__}>"


def intrinsic(fn: Callable) -> LazyIntrinsic:
    """Declare a Numba intrinsic (for kernels only); its typing function imports ``numba.types`` itself.

    >>> @intrinsic
    ... def _noop(typingctx, x):
    ...     from numba import types
    ...     return types.none(x), lambda context, builder, signature, args: None
    >>> _noop
    <lodtool intrinsic _noop>
    """
    return LazyIntrinsic(fn)


@intrinsic
def _atomic_add_i64(typingctx, counter, value):
    """:func:`atomic_add` compiled: an LLVM ``atomicrmw add`` on ``counter[0]``."""
    from numba import types

    if not (isinstance(counter, types.Array) and counter.dtype in (types.int64, types.uint64)):
        return None
    sig = counter.dtype(counter, counter.dtype)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, args[1], "monotonic")
    return sig, codegen


def _resolve(value):
    if isinstance(value, LazyKernel):
        return value.dispatcher
    if isinstance(value, LazyIntrinsic):
        return value.compiled
    return value


class _CompiledOnFirstUse:
    """A plain Python function that stands for a Numba dispatcher, made on first access by the subclass's
    ``_compile``."""

    #: what ``repr`` calls it
    kind = "kernel"

    def __init__(self, fn: Callable):
        self.py_func = fn
        self._dispatcher = None
        self._lock = threading.Lock()
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn

    @property
    def dispatcher(self):
        """The compiled Numba dispatcher (compiles on first access)."""
        if self._dispatcher is None:
            with self._lock:
                if self._dispatcher is None:
                    self._dispatcher = self._compile()
        return self._dispatcher

    def __repr__(self) -> str:
        state = "compiled" if self._dispatcher is not None else "not compiled yet"
        return f"<lodtool {self.kind} {self.__qualname__} ({state})>"


class LazyKernel(_CompiledOnFirstUse):
    """A Numba kernel compiled on its first call (``njit(cache=True, nogil=True, **options)``)."""

    def __init__(self, fn: Callable, options: dict):
        super().__init__(fn)
        self.options = options
        self.parallel = bool(options.get("parallel"))

    def _compile(self):
        numba = numba_module()
        fn = self.py_func
        glb = dict(fn.__globals__)
        glb["prange"] = numba.prange
        for name in fn.__code__.co_names:  # kernels calling kernels see their dispatchers
            if name in glb:
                glb[name] = _resolve(glb[name])
        closure = fn.__closure__
        if closure:
            closure = tuple(types.CellType(_resolve(c.cell_contents))
                            if isinstance(c.cell_contents, (LazyKernel, LazyIntrinsic)) else c for c in closure)
        func = types.FunctionType(fn.__code__, glb, fn.__name__, fn.__defaults__, closure)
        func.__qualname__ = fn.__qualname__
        func.__module__ = fn.__module__
        func.__doc__ = fn.__doc__
        return _njit(func, self.options)

    def __call__(self, *args):
        dispatcher = self.dispatcher
        if self.parallel:
            with _PARALLEL_LOCK:
                return dispatcher(*args)
        return dispatcher(*args)


#: the loop of every block kernel, one per count of the body's own arguments: Numba inlines a call into the
#: prange loop only without ``*args``, and inlined, the body compiles as that loop's code always did (no
#: aliasing among its arrays, NumPy's error model), not as a function of its own
_STEAL_BLOCKS = """
def steal_blocks(n, nblocks, counter, nworkers, {args}):
    for _ in prange(nworkers):
        blk = atomic_add(counter, ONE)
        while blk < nblocks:
            body(n * blk // nblocks, n * (blk + ONE) // nblocks, blk, {args})
            blk = atomic_add(counter, ONE)
"""


class BlockKernel(_CompiledOnFirstUse):
    """A parallel kernel written as the work of one block of items (see :func:`parallel_blocks`); its dispatcher
    is the whole loop's."""

    kind = "block kernel"

    def __init__(self, body: Callable):
        super().__init__(body)
        self.body = LazyKernel(body, {"inline": "always"})

    def _compile(self):
        numba = numba_module()
        body = self.py_func.__code__
        names = ", ".join(f"a{i}" for i in range(body.co_argcount - 3))
        space: dict = {}
        exec(_STEAL_BLOCKS.format(args=names), space)
        # The loop's code is filed under the body's file, line and name: Numba's cache keys on those (and
        # the loop's bytecode), so each kernel has a cache entry of its own, next to its body's, that a
        # change to the body's file invalidates.
        qualname = f"{self.__qualname__}_blocks"
        where = {"co_filename": body.co_filename, "co_firstlineno": body.co_firstlineno, "co_name": self.__name__}
        if hasattr(body, "co_qualname"):  # Python 3.11 and later
            where["co_qualname"] = qualname
        code = space["steal_blocks"].__code__.replace(**where)
        glb = {"prange": numba.prange, "body": self.body.dispatcher, "ONE": ONE,
               "atomic_add": atomic_add if numba.config.DISABLE_JIT else _atomic_add_i64.compiled}
        func = types.FunctionType(code, glb, self.__name__)
        func.__qualname__ = qualname
        func.__module__ = self.__module__
        return _njit(func, {"parallel": True})

    def __call__(self, n: int, *args, nblocks: int | None = None, per_worker: int = 16):
        # uint64 block and item counters: the kernel's indices are unsigned (see the kernel notes in ops/expand.py)
        blocks = np.uint64(block_count(n, per_worker) if nblocks is None else nblocks)
        dispatcher = self.dispatcher
        with _PARALLEL_LOCK:
            return dispatcher(np.uint64(n), blocks, np.zeros(1, np.uint64), workers(), *args)


def parallel_blocks(body: Callable) -> BlockKernel:
    """Declare a parallel kernel by the work of one block: ``body(lo, hi, blk, *args)`` handles items ``lo..hi-1``.

    Calling the kernel as ``k(n, *args)`` splits items ``0..n-1`` into
    :func:`block_count` blocks (``per_worker=`` blocks a thread, or ``nblocks=``
    exactly: a caller that sizes an array by blocks), and every worker
    thread takes blocks from a shared counter (:func:`atomic_add`) until none
    are left, calling ``body`` on each: dynamic scheduling, so a thread that
    shares its core with another process does not hold up the others (Numba's
    own ``prange`` split is static).  ``lo``, ``hi`` and the block's index
    ``blk`` are uint64.  The body is a :func:`kernel` (it may call others) and
    the loop around it is compiled once per kernel and cached like any kernel.

    >>> @parallel_blocks
    ... def _double(lo, hi, blk, a, out):
    ...     for i in range(lo, hi):
    ...         out[i] = 2 * a[i]
    >>> _double  # called as _double(len(a), a, out)
    <lodtool block kernel _double (not compiled yet)>
    """
    return BlockKernel(body)


def kernel(fn: Callable | None = None, **options):
    """Declare a Numba kernel, compiled lazily; ``@kernel`` or ``@kernel(parallel=True)``.

    >>> @kernel(parallel=True)
    ... def _fill(out):
    ...     for i in prange(out.shape[0]):
    ...         out[i] = i
    >>> _fill.parallel, _fill  # doctest: +ELLIPSIS
    (True, <lodtool kernel _fill (not compiled yet)>)
    """
    if fn is None:
        return lambda f: LazyKernel(f, options)
    return LazyKernel(fn, options)


__all__ = ["kernel", "parallel_blocks", "BlockKernel", "intrinsic", "prange", "atomic_add", "block_count",
           "workers", "numba_module", "numba_loaded", "kernels_pay", "LazyKernel", "LazyIntrinsic"]
