"""HAClient: the slave's connection to its master (AutoSwitchHAClient), a shell.

Connects, handshakes, truncates to the consistent point, then receives TRANSFER frames into the
commitlog and acknowledges. It carries out the effects of `SlaveProtocol` in order and stops at
the first failure: the connection closes and, after `reconnect_interval_ms`, a new one starts
with a new handshake (the protocol's own recovery). Durable steps run in worker threads
(truncation, epoch file), so does the consume-queue dispatch of received ranges
(`MessageStore.dispatch_in_thread`). Bytes are read from the socket straight into the frame
decoder's buffer, and the TRANSFER frames of one read are applied together
(`SlaveProtocol.receive_transfers`): their bodies go to the commitlog in one run (one pwritev
per file), then one ACK for the read. The loop does this for live traffic's small reads; a
backlog's 4 MiB reads go to a worker thread, which takes read after read (`HAClient._pump`)
while the loop waits for it, free for other work.

Differences from Java, on purpose: the read timeout (`haHousekeepingInterval`) applies in
HANDSHAKE too (a master that never answers is dropped, Java keeps re-sending); the first ACK goes
out right after the truncation (Java waits for its 5 s keep-alive, §5.3); the acks and the
confirmOffset of the frames of one read are coalesced into the last ones (one ACK, one dispatch
per read); the consume queues follow confirmOffset in bulk, every 50 ms at most, and while a
backlog streams in they wait for it (up to 1 GiB owed) where Java's slave dispatches alongside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar, cast

from ha.config import HAConfig
from ha.errors import HAError, HAProtocolError
from ha.flow import FlowMeter
from ha.frames import MasterFrame, MasterFrameDecoder, TransferFrame
from ha.slave_protocol import (
    Append,
    AppendEpoch,
    AppendRun,
    Send,
    SetConfirmOffset,
    SlaveEffect,
    SlaveProtocol,
    TruncateTo,
)
from ha.states import HAConnectionState
from store.errors import StoreError
from store.message_store import MessageStore

log = logging.getLogger(__name__)

T = TypeVar("T")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000

# The pump reads up to this much at a time (Java's slave reads into 4 MiB too): each read costs a
# recv, one pwritev per file and one ACK, so fewer larger reads replicate a backlog faster (1 GiB
# in its own process: 2.2-2.6 GB/s against 1.9-2.0 with 1 MiB reads, noisy host).
READ_CHUNK_BYTES: Final = 4 * 1024 * 1024
# A received confirmOffset reaches the store (and its consume queues) once DISPATCH_BYTES are
# owed, or DISPATCH_DELAY_MS after it arrived: dispatch then runs over one large range in bulk
# (one vectorised pass costs about as much for 64 KiB as for 1 MiB). Each walk is a worker-thread
# hand-off (~0.4 ms of CPU with its GIL hand-overs): every 5 ms, a 5,000 msg/s allAck load kept
# each slave's workers 8 % of a core busy, every 50 ms 3 % (and the master's p99 fell from
# 5-7 ms to 3-4). The price: a consumer reading from a slave sees a message up to 50 ms later
# (Java's slave dispatches every 1 ms).
DISPATCH_BYTES: Final = 1024 * 1024
DISPATCH_DELAY_MS: Final = 50
# While a backlog streams in (a read fills its whole buffer, or the master's confirmOffset is a
# read or more ahead), dispatch waits until this much is owed or the backlog is through: the
# commitlog first (the bytes that count for acks, the SyncStateSet and a failover), the consume
# queues in larger walks after. Run alongside, the walks took the GIL and a CPU from the
# receiving loop: a 1 GiB backlog of 4 KiB messages replicated in 0.5-1.1 s with them, and
# in 0.39-0.59 s deferred (its dispatch then took 0.1 s of CPU; 2 cores, 2026-11-27).
DISPATCH_CATCH_UP_BYTES: Final = 1024 * 1024 * 1024
# While a backlog streams in, a worker thread takes the reads (`HAClient._pump`): a 4 MiB recv and
# its pwritev took 2-4 ms of the loop each (and 10-28 ms at times on this 2-core VM: pages the
# host backs on first touch), and a thread hand-off per read cost a fifth of the throughput
# (waking a thread in this VM costs ~0.2 ms). The pump goes on read after read; it gives the
# loop back after PUMP_BYTES_MAX (dispatch, heartbeats), or at a read that is not full or that
# needs the loop (an epoch change, a handshake frame).
PUMP_BYTES_MAX: Final = 64 * 1024 * 1024
# The loop's own reads: live traffic's few KiB a read (5,000 msg/s of 1 KiB is some 5 KiB a loop
# turn); one that fills this much starts the pump.
INLINE_READ_BYTES: Final = 256 * 1024
CONNECT_TIMEOUT_S: Final = 5.0


def _catching_up(full_read: bool, master_confirm_offset: int, local_max_phy_offset: int
                 ) -> bool:
    """Whether a backlog streams in: the last read took all its room, or the master's
    confirmOffset (its end, while this slave is not in the SyncStateSet) is a read or more
    ahead of the local log."""
    return full_read or master_confirm_offset - local_max_phy_offset >= READ_CHUNK_BYTES


async def _in_thread(fn: Callable[..., T], *args: object,
                     on_cancel: Callable[[], None] = lambda: None) -> T:
    """`fn(*args)` in a worker thread. A cancellation calls `on_cancel`, then waits for `fn`
    to end before it goes on: `fn` uses the decoder's buffer and the commitlog, which the
    caller releases or cuts next."""
    future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        on_cancel()
        await asyncio.wait([future])
        raise


def _drain(decoder: MasterFrameDecoder) -> list[MasterFrame]:
    frames: list[MasterFrame] = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


@dataclass(slots=True)
class _Pumped:
    """What `HAClient._pump` leaves to the loop: the last read's size (None: the socket was
    empty, 0: the master closed it) and whether it filled its buffer; that read's frames or
    effects when they need the loop; the last confirmOffset received; an ACK the socket did
    not take whole (its unsent rest); how many reads it took."""

    nbytes: int | None = None
    full_read: bool = False
    frames: list[MasterFrame] | None = None
    effects: list[SlaveEffect] | None = None
    confirm_due: int | None = None
    ack: bytes = b""
    reads: int = 0


_PUMPED_EFFECTS: Final = (AppendRun, SetConfirmOffset, Send)


class _Connection:
    """The slave's end of the TCP connection, a plain non-blocking socket without a transport:
    `recv_into` reads straight into the caller's buffer (the decoder's) whatever is there now,
    `readable` waits for more without consuming anything (so a timeout never loses bytes).

    The socket stays registered with the loop from one wait to the next: a replicated send
    costs the slave one wake-up, not an epoll_ctl pair and a timer context on top. A readiness
    that finds no wait unregisters it (level-triggered, it would otherwise fire on every loop
    turn while the bytes sit there, e.g. while the pump's worker thread reads them)."""

    __slots__ = ("_fd", "_loop", "_registered", "_sock", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._registered = False
        self._waiter: asyncio.Future[bool] | None = None

    def recv_into(self, room: memoryview) -> int | None:
        """Bytes read now (0: the master closed), None when none are waiting."""
        try:
            return self._sock.recv_into(room)
        except (BlockingIOError, InterruptedError):
            return None

    async def readable(self, timeout_s: float) -> bool:
        """Wait until bytes (or the end) can be read; False after `timeout_s`."""
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiter = waiter
        if not self._registered:
            self._loop.add_reader(self._fd, self._on_readable)
            self._registered = True
        timer = self._loop.call_later(timeout_s, _resolve, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _on_readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.unregister()
        else:
            waiter.set_result(True)

    def unregister(self) -> None:
        """Off the loop's poll set: before the socket closes, or when no one waits."""
        if self._registered:
            self._loop.remove_reader(self._fd)
            self._registered = False

    def send_now(self, data: bytes) -> bytes:
        """Send what the socket takes now; returns the rest (b"": all sent)."""
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        return data[sent:]

    async def send(self, data: bytes) -> None:
        rest = self.send_now(data)
        if rest:
            await self._loop.sock_sendall(self._sock, rest)


def _resolve(waiter: asyncio.Future[bool], readable: bool) -> None:
    if not waiter.done():
        waiter.set_result(readable)


class HAClient:
    """Replicates from one master until cancelled."""

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        master_ha_address: tuple[str, int],
        *,
        clock_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.config = config
        self.master_ha_address = master_ha_address
        self.clock_ms = clock_ms
        self.peer = "{}:{}".format(*master_ha_address)
        self.protocol: SlaveProtocol | None = None
        self.connected = asyncio.Event()
        self.received_bytes = 0
        self.sessions = 0
        self.flow = FlowMeter(clock_ms())
        # Wall-clock times of the last read from / write to the master (haStatus), 0 = never.
        self.last_read_timestamp_ms = 0
        self.last_write_timestamp_ms = 0
        self._confirm_due: int | None = None
        self._reput: asyncio.Task[None] | None = None

    @property
    def state(self) -> HAConnectionState:
        return HAConnectionState.READY if self.protocol is None else self.protocol.state

    async def run(self) -> None:
        while True:
            try:
                await self._session()
            except (HAError, OSError, EOFError, TimeoutError, StoreError, ValueError) as err:
                log.warning("HA client disconnected master=%s reason=%s", self.peer, err)
            finally:
                self.protocol = None
                self.connected.clear()
            await asyncio.sleep(self.config.reconnect_interval_ms / 1000)

    async def _session(self) -> None:
        host, port = self.master_ha_address
        loop = asyncio.get_running_loop()
        # A plain non-blocking socket, no stream transport: frames are read straight into the
        # decoder's buffer (`sock_recv_into`), bodies copied once from there into the mapping.
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        conn = _Connection(loop, sock)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await loop.sock_connect(sock, (host, port))
            self.sessions += 1
            await self._replicate(conn)
        finally:
            conn.unregister()
            # shutdown first: the loop may still hold the descriptor (its poll handles), and
            # the master must see the end now, not when that goes.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            reput, self._reput = self._reput, None
            if reput is not None:  # its walk in flight ends before a new session truncates
                reput.cancel()
                await asyncio.gather(reput, return_exceptions=True)

    def _confirm(self, confirm_offset: int) -> None:
        """confirmOffset moved: the store dispatches up to it off the loop (one task at a time
        runs the walks, each over everything owed when it starts)."""
        self.store.set_confirm_offset(confirm_offset, dispatch=False)
        if self._reput is None or self._reput.done():
            # Each walk covers what is owed when it starts and the task looks again after it;
            # a confirmOffset that arrives meanwhile is covered by the same task.
            self._reput = asyncio.create_task(self.store.dispatch_in_thread(),
                                              name="ha-slave-reput")

    async def _replicate(self, conn: _Connection) -> None:
        config = self.config
        store = self.store
        proto = SlaveProtocol(self.peer, slave_broker_id=config.broker_id,
                              is_sync_from_last_file=config.sync_from_last_file,
                              is_async_learner=config.async_learner)
        self.protocol = proto
        decoder = MasterFrameDecoder(self.peer)
        await self._carry_out(proto.connected(
            local_max_phy_offset=store.max_phy_offset, local_epochs=store.epoch_cache,
            confirm_offset=store.confirm_offset,
        ), conn)
        self.connected.set()
        heartbeat_ms = config.ha_send_heartbeat_interval_ms
        housekeeping_ms = config.ha_housekeeping_interval_ms
        last_read = last_write = self.clock_ms()
        owed: int | None = None  # a confirmOffset received, not yet given to the store
        owed_since = 0
        full_read = False
        while True:
            self._confirm_due = None
            ack: bytes | None = None
            frames: list[MasterFrame] | None = None
            if full_read and proto.state is HAConnectionState.TRANSFER:
                # A backlog streams in: a worker thread takes the reads (`_pump`).
                pumped = await self._pump_in_thread(conn, decoder, proto)
                nbytes, full_read, frames = pumped.nbytes, pumped.full_read, pumped.frames
                self._confirm_due = pumped.confirm_due
                if pumped.effects is not None:
                    ack = await self._carry_out(pumped.effects, conn, defer_ack=True)
                if pumped.ack:
                    ack = ack or pumped.ack
                if pumped.reads:
                    last_read = last_write = self.clock_ms()
                    store.replicated_appended()
            else:
                with decoder.read_buffer(INLINE_READ_BYTES) as room:
                    nbytes = conn.recv_into(room)
                    full_read = nbytes == len(room)
                if nbytes:
                    decoder.received(nbytes)
                    last_read = self.clock_ms()
                    self.last_read_timestamp_ms = wall_ms()
                    frames = _drain(decoder)
            if nbytes == 0:
                raise EOFError("master closed the connection")
            now = self.clock_ms()
            if frames is not None:
                if proto.state is HAConnectionState.TRANSFER and \
                        all(type(frame) is TransferFrame for frame in frames):
                    # The common case: the frames of this read carried out together (one
                    # write of their bodies), then one ACK.
                    ack = await self._carry_out(
                        proto.receive_transfers(cast("list[TransferFrame]", frames)), conn,
                        defer_ack=True) or ack
                else:
                    for frame in frames:
                        effects = proto.receive(frame)
                        ack = await self._carry_out(effects, conn, defer_ack=True) or ack
                del frames
            catching_up = _catching_up(full_read, proto.master_confirm_offset,
                                       store.max_phy_offset)
            if self._confirm_due is not None:
                # Dispatch (consume queues) runs in bulk: at most DISPATCH_DELAY_MS after a
                # confirmOffset arrived, at once when DISPATCH_BYTES are owed; while catching
                # up, at DISPATCH_CATCH_UP_BYTES or once the backlog is through.
                if owed is None:
                    owed_since = now
                owed = self._confirm_due
                bound = DISPATCH_CATCH_UP_BYTES if catching_up else DISPATCH_BYTES
                if min(owed, store.max_phy_offset) - store.reput_from_offset >= bound:
                    self._confirm(min(owed, store.max_phy_offset))
                    owed = None
            if ack is not None:
                await conn.send(ack)
                last_write = self.clock_ms()
                self.last_write_timestamp_ms = wall_ms()
            if owed is not None and not catching_up and now - owed_since >= DISPATCH_DELAY_MS:
                self._confirm(min(owed, store.max_phy_offset))
                owed = None
            if full_read:
                # More may be waiting now: read again after a loop turn (a read that found
                # bytes did not suspend). After a short read the socket is drained: wait.
                await asyncio.sleep(0)
                continue
            # Nothing waiting: wait for more, a dispatch or a heartbeat.
            if owed is None:
                wait_ms = heartbeat_ms
            elif catching_up:  # the backlog's next bytes first; idle that long: dispatch
                wait_ms = DISPATCH_DELAY_MS
            else:
                wait_ms = max(0, owed_since + DISPATCH_DELAY_MS - now)
            if await conn.readable(wait_ms / 1000):
                continue
            now = self.clock_ms()
            if owed is not None:
                self._confirm(min(owed, store.max_phy_offset))
                owed = None
            if now - last_read > housekeeping_ms:
                raise EOFError(f"nothing read for {housekeeping_ms} ms")
            if proto.state is HAConnectionState.TRANSFER and \
                    now - last_write >= config.ha_send_heartbeat_interval_ms:
                await conn.send(proto.keepalive().data)
                last_write = now
                self.last_write_timestamp_ms = wall_ms()

    async def _pump_in_thread(self, conn: _Connection, decoder: MasterFrameDecoder,
                              proto: SlaveProtocol) -> _Pumped:
        """`_pump` in a worker thread; a cancellation stops it after its current read."""
        stop = threading.Event()
        return await _in_thread(self._pump, conn, decoder, proto, stop,
                                asyncio.get_running_loop(), on_cancel=stop.set)

    def _pump(self, conn: _Connection, decoder: MasterFrameDecoder, proto: SlaveProtocol,
              stop: threading.Event, loop: asyncio.AbstractEventLoop) -> _Pumped:
        """Reads of a backlog, each carried out as the loop would (its bodies appended, then
        one ACK): blocking, in a worker thread, while the loop waits for it. Returns at the
        first read that is not full, whose frames or effects need the loop (left in the
        result, not carried out), after PUMP_BYTES_MAX, or when `stop` is set. The haStatus
        counters (bytes received, flow, timestamps) are updated from this thread: a reading
        taken meanwhile may be a read behind."""
        store = self.store
        out = _Pumped()
        pumped = 0
        next_file: int | None = None
        while pumped < PUMP_BYTES_MAX and not stop.is_set():
            with decoder.read_buffer(READ_CHUNK_BYTES) as room:
                out.nbytes = conn.recv_into(room)
                out.full_read = out.nbytes == len(room)
            if not out.nbytes:
                return out
            decoder.received(out.nbytes)
            out.reads += 1
            pumped += out.nbytes
            self.last_read_timestamp_ms = wall_ms()
            frames = _drain(decoder)
            if not all(type(frame) is TransferFrame for frame in frames):
                out.frames = frames
                return out
            effects = proto.receive_transfers(cast("list[TransferFrame]", frames))
            if not all(isinstance(effect, _PUMPED_EFFECTS) for effect in effects):
                out.effects = effects
                return out
            ack = b""
            for effect in effects:
                match effect:
                    case AppendRun(phy_offset=phy_offset, bodies=bodies):
                        store.append_replicated_run_blocking(phy_offset, bodies)
                        size = sum(map(len, bodies))
                        self.received_bytes += size
                        self.flow.add(size, self.clock_ms())
                    case SetConfirmOffset(confirm_offset=confirm_offset):
                        out.confirm_due = confirm_offset
                    case Send(data=data):
                        ack = data
            del frames, effects
            wanted = store.commitlog.need_next_file()
            if wanted not in (None, next_file):
                next_file = wanted
                loop.call_soon_threadsafe(store.replicated_appended)  # prepare it ahead
            if ack:
                out.ack = conn.send_now(ack)
                self.last_write_timestamp_ms = wall_ms()
                if out.ack:
                    return out
            if not out.full_read:
                return out
        return out

    async def _carry_out(
        self, effects: list[SlaveEffect], conn: _Connection, *,
        defer_ack: bool = False,
    ) -> bytes | None:
        """Perform effects in order; returns the last deferred ACK (sent by the caller once per
        read). Any failure raises: nothing after it happens (no ACK for unappended bytes)."""
        store = self.store
        deferred: bytes | None = None
        for effect in effects:
            match effect:
                case Send(data=data):
                    if defer_ack:
                        deferred = data
                    else:
                        await conn.send(data)
                        self.last_write_timestamp_ms = wall_ms()
                case Append(phy_offset=phy_offset, body=body):
                    size = len(body)
                    if store.commitlog.raw_file_needed(phy_offset, size) is not None:
                        await store.prepare_replicated(phy_offset, size)
                    store.append_replicated(phy_offset, body)
                    self.received_bytes += size
                    self.flow.add(size, self.clock_ms())
                case AppendRun(phy_offset=phy_offset, bodies=bodies):
                    size = sum(map(len, bodies))
                    if store.commitlog.raw_file_needed(phy_offset, size) is not None:
                        await store.prepare_replicated(phy_offset, size)
                    if size > INLINE_READ_BYTES:  # a pumped read's, handed back to the loop
                        await _in_thread(store.append_replicated_run_blocking, phy_offset,
                                         bodies)
                        store.replicated_appended()
                    else:
                        store.append_replicated_run(phy_offset, bodies)
                    self.received_bytes += size
                    self.flow.add(size, self.clock_ms())
                case AppendEpoch(epoch=epoch, start_offset=start_offset):
                    await store.append_epoch(epoch, start_offset)
                    log.info("epoch entry from master epoch=%d start_offset=%d", epoch,
                             start_offset)
                case SetConfirmOffset(confirm_offset=confirm_offset):
                    if defer_ack:
                        self._confirm_due = confirm_offset
                    else:
                        self._confirm(min(confirm_offset, store.max_phy_offset))
                case TruncateTo(phy_offset=phy_offset, below_confirm=below_confirm):
                    await self._truncate(phy_offset, below_confirm, conn)
        return deferred

    async def _truncate(self, phy_offset: int, below_confirm: bool, conn: _Connection
                        ) -> None:
        store = self.store
        old_max = store.max_phy_offset
        if not store.is_record_boundary(phy_offset):
            raise HAProtocolError(
                f"master {self.peer}: consistent point {phy_offset} is not a record boundary"
            )
        if below_confirm:
            log.error("lost_committed: truncating below the local confirm offset "
                      "phy_offset=%d confirm_offset=%d master=%s", phy_offset,
                      store.confirm_offset, self.peer)
        # Durable order: commitlog cut and fsynced, then the epoch file; only then reported.
        await store.truncate_for_slave(phy_offset)
        log.info("slave truncated old_max_phy_offset=%d new_max_phy_offset=%d master=%s",
                 old_max, store.max_phy_offset, self.peer)
        assert self.protocol is not None
        await self._carry_out(self.protocol.truncated(phy_offset), conn)
