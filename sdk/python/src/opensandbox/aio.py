"""The asyncio client: :class:`AsyncClient` has the methods of
:class:`~opensandbox.Client` as coroutines.

Each call runs the synchronous transport in a thread pool of the client's
own (``max_workers`` threads), so the event loop never blocks on the
socket. A streamed exec's output is handed to the loop as it comes:
``async for piece in stream`` or callbacks (plain functions or
coroutines), called in the loop's thread. Cancelling a task that awaits an
exec or a run interrupts the call by its key (the service seals it) before
the cancellation goes on.
"""

import asyncio
import concurrent.futures
import functools
import inspect

from .client import Client, DEFAULT_TIMEOUT, INTERRUPT_WAIT, OPERATIONS
from .errors import CommandFailed, OutputError, SandboxError

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncExecStream"]

_END = object()


class AsyncExecStream:
    """An exec or run in flight, for asyncio: ``async for piece in stream``
    gives :class:`~opensandbox.types.Output` pieces; then ``result`` is the
    sealed run. :meth:`interrupt` and :meth:`aclose` as in
    :class:`~opensandbox.ExecStream`; ``async with`` closes it."""

    def __init__(self, aclient, stream):
        self._ac, self._st = aclient, stream
        self.key = stream.key
        self.result = None
        self._q = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._done = False
        self._pump = self._loop.run_in_executor(aclient._pool, self._run)

    @property
    def stdout(self):
        """What of stdout was captured so far."""
        return bytes(self._st.stdout)

    @property
    def stderr(self):
        """What of stderr was captured so far."""
        return bytes(self._st.stderr)

    def _run(self):
        def put(item):
            try:
                self._loop.call_soon_threadsafe(self._q.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is reading any more
                pass
        try:
            for piece in self._st:
                put(piece)
            put((_END, self._st.result, None))
        except BaseException as e:
            put((_END, self._st.result, e))

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done:
            raise StopAsyncIteration
        item = await self._q.get()
        if isinstance(item, tuple) and item and item[0] is _END:
            self._done = True
            self.result = item[1]
            if item[2] is not None:
                raise item[2]
            raise StopAsyncIteration
        return item

    async def wait(self):
        """Read to the end; return the result."""
        async for _ in self:
            pass
        return self.result

    async def interrupt(self):
        """Ask the service to interrupt the call; the stream still ends with
        its sealed result. Returns True when the service took it."""
        return await self._ac._run(self._st.interrupt)

    async def aclose(self):
        """Interrupt the call if it still runs and wait (at most the
        interrupt wait, and a little more) for the stream to end."""
        if not self._done and not self._pump.done():
            await self._ac._run(self._st.interrupt)
        try:
            await asyncio.wait_for(asyncio.shield(self._pump), self._ac.sync.interrupt_wait + 5)
        except (asyncio.TimeoutError, SandboxError):
            pass
        while not self._done:
            try:
                await self.__anext__()
            except (StopAsyncIteration, SandboxError):
                break

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
        return False


class AsyncClient:
    """An asyncio client of one sandbox service: the arguments of
    :class:`~opensandbox.Client`, and ``max_workers``, the threads its calls
    run on (each exec in flight holds one). ``sync`` is the underlying
    synchronous client."""

    def __init__(self, address=None, *, token=None, ca_file=None, ssl_context=None, timeout=DEFAULT_TIMEOUT,
                 policy=None, interrupt_wait=INTERRUPT_WAIT, max_workers=32, _sync=None):
        self.sync = _sync or Client(address, token=token, ca_file=ca_file, ssl_context=ssl_context,
                                    timeout=timeout, policy=policy, interrupt_wait=interrupt_wait)
        self.address = self.sync.address
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="opensandbox")
        self._own_pool = True

    async def _run(self, fn, *a, **kw):
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *a, **kw))

    def narrowed(self, policy):
        """An async client sharing this one's connections and threads, held to
        ``policy`` as well (:meth:`opensandbox.Client.narrowed`)."""
        c = AsyncClient.__new__(AsyncClient)
        c.sync, c.address, c._pool, c._own_pool = self.sync.narrowed(policy), self.address, self._pool, False
        return c

    async def aclose(self):
        """Close idle connections and stop the client's threads."""
        self.sync.close()
        if self._own_pool:
            self._pool.shutdown(wait=False)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
        return False

    def __repr__(self):
        return "AsyncClient(%s)" % self.address

    # -- sandboxes
    async def create(self, **kw):
        """:meth:`opensandbox.Client.create`; returns an :class:`AsyncSandbox`."""
        sb = await self._run(self.sync.create, **kw)
        return AsyncSandbox(self, sb)

    async def sandbox(self, sandbox_id):
        """:meth:`opensandbox.Client.sandbox`; returns an :class:`AsyncSandbox`."""
        return AsyncSandbox(self, await self._run(self.sync.sandbox, sandbox_id))

    async def claim(self, pool, timeout=None):
        """:meth:`opensandbox.Client.claim`; returns an :class:`AsyncSandbox`."""
        return AsyncSandbox(self, await self._run(self.sync.claim, pool, timeout))

    # -- streams
    async def exec_stream(self, sandbox_id, args, **kw):
        """:meth:`opensandbox.Client.exec_stream`, as an :class:`AsyncExecStream`."""
        return AsyncExecStream(self, await self._run(self.sync.exec_stream, sandbox_id, args, **kw))

    async def run_stream(self, args, **kw):
        """:meth:`opensandbox.Client.run_stream`, as an :class:`AsyncExecStream`."""
        return AsyncExecStream(self, await self._run(self.sync.run_stream, args, **kw))

    async def exec(self, sandbox_id, args, *, on_stdout=None, on_stderr=None, check=False, **kw):
        """:meth:`opensandbox.Client.exec`. ``on_stdout`` / ``on_stderr`` may
        be functions or coroutine functions, called in the loop's thread.
        Cancelling the task interrupts the call (sealed) and waits briefly
        for it before the cancellation goes on."""
        return await self._drive(await self.exec_stream(sandbox_id, args, **kw), on_stdout, on_stderr, check)

    async def run(self, args, *, on_stdout=None, on_stderr=None, check=False, **kw):
        """:meth:`opensandbox.Client.run`, as :meth:`exec` is for execs."""
        return await self._drive(await self.run_stream(args, **kw), on_stdout, on_stderr, check)

    async def _drive(self, st, on_stdout, on_stderr, check):
        cbs = {"stdout": on_stdout, "stderr": on_stderr}
        try:
            async for piece in st:
                f = cbs[piece.stream]
                if f is None:
                    continue
                try:
                    r = f(piece.data)
                    if inspect.isawaitable(r):
                        await r
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    await st.aclose()
                    raise OutputError("writing the program's %s failed: %r; the call was interrupted"
                                      % (piece.stream, e), result=st.result) from e
        except asyncio.CancelledError:
            await st.aclose()
            raise
        r = st.result
        if check and not r.ok:
            raise CommandFailed(r)
        return r

    async def fleet(self, args=None, *, on_progress=None, **kw):
        """:meth:`opensandbox.Client.fleet`; ``on_progress`` (a function or a
        coroutine function) is called in the loop's thread."""
        loop = asyncio.get_running_loop()
        pending = []

        def progress(p):
            if on_progress is not None:
                pending.append(asyncio.run_coroutine_threadsafe(_call(on_progress, p), loop))
        res = await self._run(self.sync.fleet, args, on_progress=progress if on_progress else None, **kw)
        for f in pending:
            await asyncio.wrap_future(f)
        return res

    async def watch(self, sandbox_id, path, on_event, **kw):
        """:meth:`opensandbox.Client.watch`; ``on_event`` (a function or a
        coroutine function) is called in the loop's thread, one event at a
        time; returning False stops the watch."""
        loop = asyncio.get_running_loop()

        def each(e):
            return asyncio.run_coroutine_threadsafe(_value(on_event, e), loop).result()
        return await self._run(self.sync.watch, sandbox_id, path, each, **kw)


async def _value(f, *a):
    r = f(*a)
    if inspect.isawaitable(r):
        r = await r
    return r


async def _call(f, *a):
    r = f(*a)
    if inspect.isawaitable(r):
        await r


def _wrap(name):
    meth = getattr(Client, name)

    async def call(self, *a, **kw):
        return await self._run(getattr(self.sync, name), *a, **kw)
    call.__name__ = name
    call.__qualname__ = "AsyncClient." + name
    call.__doc__ = "Awaitable :meth:`opensandbox.Client.%s`: %s" % (name, (meth.__doc__ or "").strip())
    return call


# Every other method of the operations table (client.OPERATIONS) runs the
# synchronous one in the client's threads.
for _name in sorted(OPERATIONS):
    if _name not in AsyncClient.__dict__:
        setattr(AsyncClient, _name, _wrap(_name))


class AsyncSandbox:
    """A handle on one sandbox of an :class:`AsyncClient`, with the methods
    of :class:`~opensandbox.Sandbox` as coroutines; ``async with`` removes
    it at the end."""

    def __init__(self, aclient, sandbox):
        self.client, self._sb = aclient, sandbox
        self.id = sandbox.id

    def __repr__(self):
        return "AsyncSandbox(%s, %s)" % (self.id, self._sb.info.state or "?")

    @property
    def info(self):
        """The :class:`~opensandbox.types.SandboxInfo` last read."""
        return self._sb.info

    @property
    def workspace(self):
        """Its workspace directory."""
        return self._sb.workspace

    def path(self, p="."):
        """``p`` as an absolute path (relative: in the workspace)."""
        return self._sb.path(p)

    async def exec(self, args, **kw):
        """:meth:`AsyncClient.exec` in this sandbox."""
        return await self.client.exec(self.id, args, **kw)

    async def exec_stream(self, args, **kw):
        """:meth:`AsyncClient.exec_stream` in this sandbox."""
        return await self.client.exec_stream(self.id, args, **kw)

    async def write_file(self, path, data, mode=0o644):
        """Write a file (relative: in the workspace); returns its size."""
        return await self.client._run(self._sb.write_file, path, data, mode)

    async def read_file(self, path):
        """Read a file (relative: in the workspace)."""
        return await self.client._run(self._sb.read_file, path)

    async def read_text(self, path, encoding="utf-8"):
        """Read a file as text."""
        return (await self.read_file(path)).decode(encoding)

    async def list_files(self, path="."):
        """List a directory (relative: in the workspace)."""
        return await self.client._run(self._sb.list_files, path)

    async def refresh(self):
        """Read its description again."""
        return await self.client._run(self._sb.refresh)

    async def suspend(self):
        """Park it; returns the snapshot."""
        return await self.client._run(self._sb.suspend)

    async def fork(self, count, *, suspended=False):
        """Make ``count`` sandboxes from its state; returns the fork."""
        return await self.client._run(self._sb.fork, count, suspended=suspended)

    async def expose_port(self, port, *, ttl_seconds=None):
        """Expose one of its ``listen`` ports; returns the preview, with its URL."""
        return await self.client._run(self._sb.expose_port, port, ttl_seconds=ttl_seconds)

    async def list_ports(self):
        """Its open previews."""
        return await self.client._run(self._sb.list_ports)

    async def revoke_port(self, port):
        """Revoke the open previews of ``port``; returns how many."""
        return await self.client._run(self._sb.revoke_port, port)

    async def resume(self, *, here=False):
        """Start it again (``here``: on the host asked, in a cluster); returns
        its new description."""
        return await self.client._run(self._sb.resume, here=here)

    async def close(self):
        """End its durable run."""
        await self.client._run(self._sb.close)

    async def remove(self):
        """End it."""
        await self.client._run(self._sb.remove)

    async def seed(self, source, ref, **kw):
        """Seed its workspace with a git checkout."""
        return await self.client._run(self._sb.seed, source, ref, **kw)

    async def preservation(self, claim, source, incarnation=None):
        """Its preservation receipt."""
        return await self.client._run(self._sb.preservation, claim, source, incarnation)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.client._run(self._sb.__exit__, None, None, None)
        return False

