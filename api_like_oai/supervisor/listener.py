"""The supervisor's end of the socket, and the process's main (`run`): one `Connection` per worker
request reads one typed request (messages.py), asks the state machine (service.Supervisor), and writes
its replies. A lease is a live connection, so a worker that dies or a client that goes away can never
strand a model's in-flight count (llama-swap's rule: count only a caller that holds the handler).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from . import drafts, messages, plan
from .process import stop_leftovers
from .service import TICK_SECONDS, Supervisor, SupervisorError
from .spec import SupervisorSettings

log = logging.getLogger("api_like_oai.supervisor")


class Connection:
    """One worker's connection: a request line in, answer lines out. Its end (EOF) is watched from the
    first line on: a worker that hangs up cancels what it waited for, or releases what it held."""

    def __init__(self, supervisor: Supervisor, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.supervisor, self.reader, self.writer = supervisor, reader, writer
        self.hung_up: asyncio.Future | None = None

    async def say(self, message: messages.Reply) -> None:
        self.writer.write(messages.encode(message))
        await self.writer.drain()

    async def serve(self) -> None:
        try:
            request = messages.read_request(await self.reader.readline())
            self.hung_up = asyncio.ensure_future(self.reader.read())  # the one reader from here on
            await self._answer(request)
        except SupervisorError as exc:
            await self._say_quietly(exc.reply())
        except (ConnectionError, ValueError):  # a worker gone, or a line of no request (BadMessage)
            pass
        finally:
            if self.hung_up is not None:
                self.hung_up.cancel()
            self.writer.close()

    async def _say_quietly(self, message: messages.Reply) -> None:
        try:
            await self.say(message)
        except ConnectionError:
            pass

    async def _answer(self, request: messages.Request) -> None:
        supervisor = self.supervisor
        match request:
            case messages.Acquire(model, unreachable):
                await self._lease(model, unreachable)
            case messages.Status():
                await self.say(messages.ServerStatus(supervisor.status()))
            case messages.Occupancy():
                await self.say(messages.ServerStatus(await self._until_gone(supervisor.occupancy())))
            case messages.Logs(model):
                await self.say(messages.LogLines(supervisor.logs(model)))
            case messages.Load(model, args, lent_mib, rpc):
                loading = supervisor.load(model, args, self.say, lent_mib, rpc)
                await self.say(messages.ModelStatus(await self._until_gone(loading)))
            case messages.Unload(model):
                await self.say(messages.ModelStatus(await self._until_gone(supervisor.unload(model))))
            case messages.KeepAlive(model, seconds):
                await self.say(messages.ModelStatus(supervisor.keep_alive(model, float(seconds))))
            case messages.Events():
                await self._events()

    async def _until_gone(self, work):
        """`work`'s result, or cancelled if the worker hangs up first (a client that went away)."""
        task = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task, self.hung_up}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            task.cancel()
            raise ConnectionError("the worker hung up")
        return task.result()

    async def _lease(self, name: str, unreachable: list[str]) -> None:
        urls = await self._until_gone(self.supervisor.acquire(name, self.say, unreachable))
        try:
            await self.say(messages.Granted(urls))
            await self.hung_up  # the lease lasts as long as the connection
        finally:
            self.supervisor.release(name)

    async def _events(self) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        self.supervisor.subscribers.append(queue)
        try:
            await self.say(messages.Event(self.supervisor.status()))
            while True:
                await self.say(messages.Event(await self._until_gone(queue.get())))
        finally:
            self.supervisor.subscribers.remove(queue)


async def run(settings: SupervisorSettings, socket_path: str) -> None:
    pid_file = socket_path + ".children"  # what a supervisor started in this one's place must not find running
    stop_leftovers(pid_file)
    supervisor = Supervisor(settings, pid_file)
    server = await asyncio.start_unix_server(
        lambda reader, writer: Connection(supervisor, reader, writer).serve(), path=socket_path
    )
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, ended.set)
    loop.add_reader(sys.stdin.fileno(), lambda: _parent_gone(ended))
    for spec in settings.models:
        if spec.preload:
            loop.create_task(_preload(supervisor, spec.name))
    ticker = loop.create_task(_tick(supervisor))
    draft_reader = loop.create_task(_read_drafts(supervisor))
    estimates = loop.create_task(supervisor.estimate_all())
    print("ready", flush=True)  # the parent waits for this line before it starts the workers
    await ended.wait()
    ticker.cancel()
    draft_reader.cancel()
    estimates.cancel()
    server.close()
    await supervisor.stop_all()


def _parent_gone(ended: asyncio.Event) -> None:
    """stdin is the parent's pipe: its end (EOF) means the proxy is gone, however it went."""
    if not os.read(sys.stdin.fileno(), 4096):
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        ended.set()


async def _preload(supervisor: Supervisor, name: str) -> None:
    async def quiet(_message):
        return None

    try:
        await supervisor.load(name, None, quiet)
    except SupervisorError as exc:
        log.warning("model %s: preload failed: %s", name, exc.message)


async def _read_drafts(supervisor: Supervisor) -> None:
    """The loaded draft models' acceptance, read every few seconds (a status never waits for it)."""
    while True:
        await asyncio.sleep(drafts.READ_EVERY_SECONDS)
        for model in list(supervisor.models.values()):
            if model.spec.draft and model.status == plan.LOADED:
                await supervisor.read_drafts(model)


async def _tick(supervisor: Supervisor) -> None:
    while True:
        await asyncio.sleep(TICK_SECONDS)
        supervisor.reconsider()
