"""HAConnection: one slave's connection on the master (AutoSwitchHAConnection), a shell.

A reader coroutine feeds the slave's frames to `MasterConnectionProtocol` and reports acks to
the service; a writer coroutine sends the handshake reply, then TRANSFER frames straight from
the commitlog mapping (memoryviews, no copy of the bodies), and heartbeats when idle. Either side
failing closes the connection (bad input fails alone: one WARNING, the slave reconnects).
Nothing read for `haHousekeepingInterval` closes it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Final

from ha.errors import HAError, HandshakeRefusedError
from ha.flow import FlowMeter
from ha.frames import SlaveFrameDecoder, SlaveHandshake
from ha.master_protocol import MasterConnectionProtocol

if TYPE_CHECKING:
    from ha.service import AutoSwitchHAService

log = logging.getLogger(__name__)

READ_CHUNK_BYTES: Final = 64 * 1024
# The writer re-checks for new data at least this often even without a wake-up.
WRITER_POLL_S: Final = 0.05
# The writer yields to the event loop after this many body bytes written in a row.
YIELD_EVERY_BYTES: Final = 1024 * 1024
# TRANSFER frames (each <= haTransferBatchSize) are written together up to this many body bytes
# (one writev; a slave reads up to 1 MiB at a time). 1 MiB rather than 256 KiB took some 10 %
# less CPU per replicated byte (median of 7 interleaved rounds each, noisy host).
WRITE_COALESCE_BYTES: Final = 1024 * 1024


class HAConnection:
    """Owned by the service; `run()` until the slave goes or `close()`."""

    def __init__(
        self,
        service: AutoSwitchHAService,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        peer: str,
    ) -> None:
        self.service = service
        self.peer = peer
        self._reader = reader
        self._writer = writer
        self.protocol = MasterConnectionProtocol(
            peer, now_ms=service.clock_ms(), confirm_idle_ms=service.confirm_idle_ms)
        self._decoder = SlaveFrameDecoder(peer)
        self.wakeup = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.transferred_bytes = 0
        self.flow = FlowMeter(service.clock_ms())
        self._last_read_ms = service.clock_ms()

    async def run(self) -> None:
        self._task = asyncio.current_task()
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read_loop(), name=f"ha-read-{self.peer}")
                group.create_task(self._write_loop(), name=f"ha-write-{self.peer}")
        except* (HAError, OSError, EOFError) as group_error:
            for err in group_error.exceptions:
                log.warning("HA connection closed peer=%s slave_broker_id=%s reason=%s",
                            self.peer, self.protocol.slave_broker_id, err)
        finally:
            # Dropped: what is still buffered for this slave goes too (a close would wait to
            # flush it to a slave that may never read again).
            self._writer.transport.abort()
            try:
                with contextlib.suppress(OSError, ConnectionError):
                    await self._writer.wait_closed()
            finally:
                self._closed.set()  # also when cancelled meanwhile: close() waits for this

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait_closed(self) -> None:
        if self._task is not None:
            await self._closed.wait()

    async def _read_loop(self) -> None:
        service = self.service
        while True:
            # No timer per read: the writer closes the connection after
            # haHousekeepingInterval of silence (`_check_silence`).
            data = await self._reader.read(READ_CHUNK_BYTES)
            if not data:
                raise EOFError("slave closed the connection")
            self._last_read_ms = service.clock_ms()
            self._decoder.feed(data)
            # The writer has something new to do after a HANDSHAKE (the reply) or the first
            # ACK (shipping starts); a later ACK changes nothing it sends (a moved confirmOffset
            # wakes it from the service), so acks alone do not wake it.
            wake = False
            while (frame := self._decoder.next_frame()) is not None:
                first_ack = self.protocol.slave_request_offset is None
                if isinstance(frame, SlaveHandshake):
                    wake = True
                    if service.peer_refusal is not None and self.protocol.slave_broker_id is None:
                        refusal = await service.peer_refusal(frame.slave_broker_id, self.peer)
                        if refusal is not None:
                            raise HandshakeRefusedError(f"HANDSHAKE refused: {refusal}")
                acked = self.protocol.receive(frame, replica_ids=service.replica_ids(),
                                              store=service.store_view())
                if acked is not None:
                    wake |= first_ack
                    if first_ack:
                        # Where this connection starts shipping: a slave that cut back (a
                        # Java 5.5.0 slave with stale epoch entries, §6) starts low again.
                        log.info("HA slave first ack slave_broker_id=%d offset=%d peer=%s",
                                 acked.broker_id, acked.max_offset, self.peer)
                    service.on_ack(acked, self.protocol.last_master_max_offset)
            if wake:
                self.wakeup.set()

    async def _write_loop(self) -> None:
        service = self.service
        config = service.config
        store = service.store
        writer = self._writer
        unyielded = 0  # bytes written since this coroutine last gave the loop a turn
        loop = asyncio.get_running_loop()
        while True:
            self._check_silence()
            if unyielded >= YIELD_EVERY_BYTES:
                # drain() returns at once while the socket takes everything: without this the
                # writer would hold the loop for a whole backlog.
                await asyncio.sleep(0)
                unyielded = 0
            if writer.is_closing():  # the slave went (a reset): no write on a closed transport
                raise EOFError("slave connection closed")
            view = service.store_view()
            reply = self.protocol.handshake_reply(view)
            if reply is not None:
                writer.write(reply.encode())
                await self._drain()
                self.protocol.wrote(service.clock_ms())
                continue
            headers = self.protocol.next_transfers(
                view, now_ms=service.clock_ms(), batch_size=config.ha_transfer_batch_size,
                heartbeat_interval_ms=config.ha_send_heartbeat_interval_ms,
                bytes_max=WRITE_COALESCE_BYTES,
            )
            if not headers:
                if self.protocol.slave_broker_id is not None and self.protocol.caught_up(view):
                    service.caught_up(self.protocol.slave_broker_id)
                self.wakeup.clear()
                # A timer handle, not a timeout context: this wait comes once per send.
                poll = loop.call_later(WRITER_POLL_S, self.wakeup.set)
                try:
                    await self.wakeup.wait()
                finally:
                    poll.cancel()
                continue
            first, last = headers[0], headers[-1]
            if not first.body_size:  # a heartbeat
                writer.write(first.encode())
                await self._drain()
                self.protocol.wrote(service.clock_ms())
                continue
            # The frames (consecutive data of one file) go out in one writelines (one writev),
            # the bodies as views of the mapping: no copy. Retention may delete the file while
            # the transport still holds some; the mapping then stays until they go
            # (MappedFile.destroy).
            base = first.offset
            batch_bytes = last.offset + last.body_size - base
            with store.commitlog.view(base, batch_bytes) as whole:
                parts: list[bytes | memoryview] = []
                for header in headers:
                    at = header.offset - base
                    parts.append(header.encode())
                    parts.append(whole[at : at + header.body_size])
            writer.writelines(parts)
            del parts
            await self._drain()
            self.transferred_bytes += batch_bytes
            self.flow.add(batch_bytes, service.clock_ms())
            unyielded += batch_bytes
            self.protocol.wrote(service.clock_ms())

    def _check_silence(self) -> None:
        """Nothing read from the slave for haHousekeepingInterval: it is gone. Called by the
        writer, which looks at least every WRITER_POLL_S and bounds its waits for the socket."""
        housekeeping_ms = self.service.config.ha_housekeeping_interval_ms
        if self.service.clock_ms() - self._last_read_ms > housekeeping_ms:
            raise EOFError(f"nothing read for {housekeeping_ms / 1000:.1f} s")

    async def _drain(self) -> None:
        """`drain()`, and while it waits (the socket full: a stopped slave reads nothing) the
        silence is still watched. While the socket takes everything, the common case, drain
        does not wait and no timer is made."""
        writer = self._writer
        transport = writer.transport
        if transport.get_write_buffer_size() <= transport.get_write_buffer_limits()[1]:
            await writer.drain()
            return
        while True:
            self._check_silence()
            try:
                async with asyncio.timeout(WRITER_POLL_S):
                    await writer.drain()
            except TimeoutError:
                continue
            return
