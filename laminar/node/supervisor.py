"""The supervisor: the `laminar-node` process that owns the node's shards.

Theory of operation:

- Preparation (synchronous, before any shard exists), each step a fatal
  `StartupError` with a one-line reason: create and lock the data directory
  (one node per data directory), read or create the node id, resolve the
  runtime (io_uring or stock asyncio), bind every socket (`listeners`), set up
  request steering (`steering`, where laminar.xdp plugs in).
- Shards are separate programs (`python -m laminar.shards.shard_main`) started
  with `subprocess.Popen` and `pass_fds`, not forked from a running loop: each
  inherits exactly its sockets (its UDP socket of the steering group among
  them, but no BPF program or map) and one end of its control socketpair, and
  pins itself to its core first thing.
- Start-up succeeds when every shard has sent READY; a shard that exits before
  that fails the whole start (its own log line says why). Then the supervisor
  writes `<data-dir>/run/node.json` (ports and pids, for tests and tools) and
  logs one "ready" line.
- Watching: each shard's exit is seen through a pidfd. A shard that exits while
  the node runs is restarted (its partitions recover from disk when next
  touched) after a backoff that grows while it keeps crashing; node.json is
  rewritten once the new process is ready. A restart that cannot even start
  the process (out of file descriptors, memory, processes) is retried with the
  same backoff, never given up: meanwhile `/health` answers 503 naming the
  shard and the error. The supervisor keeps the listening
  sockets, so clients of a restarting shard wait in the backlog instead of being
  refused.
- SIGTERM / SIGINT: every shard is sent SIGTERM and drains (see `shard`); the
  supervisor waits (bounded, then SIGKILL), removes node.json, and exits 0 if
  every shard drained cleanly.
- SIGHUP: the TLS certificate and key are loaded again, here (the admin
  endpoint and membership's signing key) and in every shard, which the
  supervisor forwards it to; new handshakes use them, connections already
  open keep theirs.
- The admin endpoint (`admin`) runs here and asks the shards for their stats
  over the control sockets.
- Membership (`membership`, when the node runs it: `NodeConfig.membership`) runs here too,
  so it outlives shard restarts: the SWIM agent joins through `--join`, pushes
  each new view to every shard over its control socket (and the current one to
  a shard that becomes ready), and on SIGTERM announces, once the shards have
  drained, that the node stopped (SWIM's graceful leave: peers stop probing
  and routing to it at once; it keeps its place for the dead grace, so a
  restart catches up instead of being copied).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from typing import Any, Final

from laminar.log.storage import SyscallBackend, atomic_replace, atomic_replace_blocking
from laminar.node.admin import (
    TOKEN_FILE,
    AdminRefusal,
    AdminServer,
    AdminSource,
    create_token_file,
)
from laminar.node.gossip import NodeGossip, prepare_gossip
from laminar.node.listeners import NodeSockets, StartupError, bind_admin, bind_node
from laminar.node.prometheus import ShardSample, render
from laminar.node.steering import Steering, prepare_steering
from laminar.replication.auth import SecretFileError
from laminar.security.tls import ServerTls, TlsFiles
from laminar.shards.bootstrap_user import read_user_file
from laminar.shards.config import UDP_OFF, NodeConfig
from laminar.shards.control import (
    CONTROL_MAX_FRAME_BYTES,
    CONTROL_READY,
    CONTROL_STATS,
    stats_request,
    view_frame,
)
from laminar.swim import MembershipView, SwimUsageError
from laminar.wire import NEED_DATA, FrameDecoder, ProtocolError

logger = logging.getLogger("laminar.node")

READY_TIMEOUT_S: Final = 120.0
SHUTDOWN_TIMEOUT_S: Final = 30.0
STATS_TIMEOUT_S: Final = 2.0
RESTART_BACKOFF_S: Final = (0.1, 0.5, 1.0, 2.0, 5.0)
STABLE_AFTER_S: Final = 30.0
"""A shard that ran this long before crashing restarts with the shortest backoff."""
NODE_FILE: Final = "node.json"


class ShardProcess:
    """One shard slot: its current process, control channel and history."""

    def __init__(self, shard_id: int) -> None:
        self.shard_id = shard_id
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: asyncio.Future[dict[str, Any]] | None = None
        self.exited: asyncio.Future[int] | None = None
        self.restarts = 0
        self.crashes_in_a_row = 0
        self.start_error: str | None = None
        """Why the last attempt to start this shard's process failed (None: it did not)."""
        self.started_at = 0.0
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def up(self) -> bool:
        return (
            self.exited is not None
            and not self.exited.done()
            and self.ready is not None
            and self.ready.done()
            and not self.ready.cancelled()
            and self.ready.exception() is None
        )

    async def attach(self, proc: subprocess.Popen[bytes], control: socket.socket) -> None:
        """Start watching a freshly started process."""
        loop = asyncio.get_running_loop()
        self.proc = proc
        self.started_at = time.monotonic()
        self.ready = loop.create_future()
        self.exited = loop.create_future()
        self._watch_exit(loop, proc, self.exited)
        reader, self._writer = await asyncio.open_connection(sock=control)
        self._reader_task = loop.create_task(self._read_control(reader, self.ready))

    def _watch_exit(
        self,
        loop: asyncio.AbstractEventLoop,
        proc: subprocess.Popen[bytes],
        fut: asyncio.Future[int],
    ) -> None:
        pidfd = os.pidfd_open(proc.pid)

        def on_exit() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            code = proc.wait()
            if not fut.done():
                fut.set_result(code)
            ready = self.ready
            if ready is not None and not ready.done():
                ready.set_exception(RuntimeError(f"shard exited with code {code}"))
                ready.exception()  # retrieved here: the exit is reported by the watcher

        loop.add_reader(pidfd, on_exit)

    async def _read_control(
        self, reader: asyncio.StreamReader, ready: asyncio.Future[dict[str, Any]]
    ) -> None:
        decoder = FrameDecoder(CONTROL_MAX_FRAME_BYTES)
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    if frame.op == CONTROL_READY and not ready.done():
                        ready.set_result(frame.header)
                    elif frame.op == CONTROL_STATS:
                        fut = self._pending.pop(frame.correlation_id, None)
                        if fut is not None and not fut.done():
                            stats = frame.header.get("stats")
                            fut.set_result(stats if isinstance(stats, dict) else {})
        except (OSError, ProtocolError) as exc:
            logger.debug("control channel of shard %d: %s", self.shard_id, exc)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("shard control channel closed"))
            self._pending.clear()

    def send_control(self, data: bytes) -> None:
        """Queue a frame for the shard (dropped when its channel is closed)."""
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(data)

    async def stats(self) -> dict[str, Any] | None:
        """The shard's stats snapshot, or None if it does not answer in time."""
        if not self.up or self._writer is None:
            return None
        corr = next(self._ids) & 0xFFFF_FFFF
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        try:
            self._writer.write(stats_request(corr))
            return await asyncio.wait_for(fut, STATS_TIMEOUT_S)
        except (TimeoutError, ConnectionError, OSError):
            return None
        finally:
            self._pending.pop(corr, None)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.exited is not None and not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def close_control(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class Supervisor:
    """Runs a node (see the module docstring). `Supervisor(config).run()` -> exit code."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.sockets: NodeSockets | None = None
        self.admin_sock: socket.socket | None = None
        self.tls: ServerTls | None = None
        self.steering: Steering | None = None
        self.membership: NodeGossip | None = None
        self.runtime = ""
        self.slots = [ShardProcess(i) for i in range(config.cores)]
        self._lock_fd: int | None = None
        self._stopping = False
        self._stop: asyncio.Event | None = None
        self._node_file_lock = asyncio.Lock()

    # -- preparation -----------------------------------------------------------

    def prepare(self) -> None:
        """Everything that can fail before a shard starts; raises `StartupError`."""
        config = self.config
        self._prepare_data_dir()
        node_id = self._node_id()
        self._warn_unauthenticated_peers()
        self._check_client_security()
        self.tls = self._load_tls()
        self.runtime = self._resolve_runtime()
        self.sockets = bind_node(config)
        self.admin_sock = bind_admin(config)
        self.steering = prepare_steering(config, self.sockets)
        self.config = config.with_updates(node_id=node_id)
        self.membership = prepare_gossip(
            self.config, self.sockets.port, self.steering.bind_membership
        )

    def _prepare_data_dir(self) -> None:
        """The data dir, owner-only: records are readable by the node's user alone
        (the umask covers every file and directory the node makes from here on)."""
        config = self.config
        os.umask(0o077)
        try:
            os.makedirs(config.run_dir, exist_ok=True)
            os.makedirs(config.partitions_dir, exist_ok=True)
            probe = os.path.join(config.run_dir, f".probe-{os.getpid()}")
            with open(probe, "wb") as f:
                f.write(b"x")
            os.unlink(probe)
        except OSError as exc:
            raise StartupError(
                f"data dir {config.data_dir} is not usable: {exc.strerror or exc}; "
                "choose a writable directory with --data-dir"
            ) from None
        try:
            os.chmod(config.data_dir, 0o700)  # a dir made by an older version, or by hand
        except OSError as exc:
            logger.warning("cannot make the data dir %s owner-only: %s", config.data_dir, exc)
        lock_path = os.path.join(config.run_dir, "lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StartupError(
                f"data dir {config.data_dir} is in use by another laminar-node (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(config.run_dir, NODE_FILE))

    def _warn_unauthenticated_peers(self) -> None:
        """Peers without a secret run only with --insecure-peers, on loopback
        (NodeConfig checks), and never quietly."""
        if self.config.peer_auth == "insecure":
            logger.warning(
                "--insecure-peers: peer connections are NOT authenticated; any process on "
                "this host can claim to be a peer and rewrite or erase the cluster's logs"
            )

    def _check_client_security(self) -> None:
        """A bad bootstrap user file stops start-up here (the shards read it
        again); a node facing a network without TLS and logins runs only with
        --insecure (NodeConfig checks), and never quietly."""
        config = self.config
        if config.bootstrap_user_file:
            try:
                read_user_file(config.bootstrap_user_file)
            except SecretFileError as exc:
                raise StartupError(str(exc)) from None
        if config.insecure and not (config.tls and config.authenticated):
            logger.warning(
                "--insecure: clients on %s are served without %s; whoever reaches this "
                "node's ports may read, write and delete every topic",
                config.host,
                "TLS and authentication"
                if not (config.tls or config.authenticated)
                else ("TLS" if not config.tls else "authentication"),
            )

    def _load_tls(self) -> ServerTls | None:
        """The TLS files, loaded once here so a bad one stops start-up before any
        shard runs (each shard loads its own copy, and again on SIGHUP)."""
        config = self.config
        if not config.tls:
            return None
        try:
            return ServerTls(
                TlsFiles(config.tls_cert_file, config.tls_key_file, config.tls_ca_file)
            )
        except (OSError, ssl.SSLError) as exc:
            raise StartupError(f"the TLS certificate or key cannot be loaded: {exc}") from None

    def _reload_tls(self) -> None:
        """SIGHUP: every shard, the admin endpoint and membership load the TLS files again."""
        if self.tls is None:
            logger.info("SIGHUP: no TLS to reload")
            return
        self.tls.reload()
        if self.membership is not None:
            self.membership.reload(self.config)
        for slot in self.slots:
            slot.signal(signal.SIGHUP)

    def _node_id(self) -> str:
        path = os.path.join(self.config.data_dir, "node_id")
        try:
            with open(path) as f:
                node_id = f.read().strip()
            if node_id:
                if self.config.node_id and self.config.node_id != node_id:
                    raise StartupError(
                        f"--node-id {self.config.node_id} does not match the data dir "
                        f"{self.config.data_dir}, which belongs to node {node_id}"
                    )
                return node_id
        except FileNotFoundError:
            pass
        node_id = self.config.node_id or f"node-{uuid.uuid4().hex[:12]}"
        atomic_replace_blocking(path, node_id.encode() + b"\n")
        return node_id

    def _resolve_runtime(self) -> str:
        from laminar.iouring import IoUringUnavailable
        from laminar.reactor import resolve_runtime

        try:
            return resolve_runtime(self.config.runtime)
        except IoUringUnavailable as exc:
            raise StartupError(f"--runtime uring is not possible here: {exc}") from None

    # -- running ---------------------------------------------------------------

    def run(self) -> int:
        """Prepare, run until SIGTERM/SIGINT, drain; return the exit code."""
        try:
            try:
                self.prepare()
            except StartupError as exc:
                logger.error("%s", exc)
                print(f"laminar-node: {exc}", file=sys.stderr)
                return 2
            return asyncio.run(self._main())
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self.membership is not None:
            self.membership.close()
        if self.steering is not None:
            try:
                self.steering.close()
            except Exception:
                logger.exception("undoing request steering failed")
        if self.sockets is not None:
            self.sockets.close()
        if self.admin_sock is not None:
            self.admin_sock.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.config.run_dir, NODE_FILE))
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_tls)
        assert self.sockets is not None and self.steering is not None
        logger.info(
            "starting %d shard%s (runtime %s, routing %s: %s; data %s)",
            self.config.cores,
            "s" if self.config.cores != 1 else "",
            self.runtime,
            self.steering.mode,
            self.steering.detail,
            self.config.data_dir,
        )
        for slot in self.slots:
            await self._spawn(slot)
        failure = await self._await_start()
        if failure is not None:
            logger.error("%s", failure)
            print(f"laminar-node: {failure}", file=sys.stderr)
            await self._shutdown()
            return 1
        admin = None
        if self.admin_sock is not None:
            token = create_token_file(self.config.run_dir)
            tls = None if self.tls is None else self.tls.switching_context()
            admin = AdminServer(self.admin_sock, self._admin_source(), token, tls)
            await admin.start()
        if self.membership is not None:
            self.membership.start(self._publish_view)
            self._publish_view(self.membership.view())
        await self._write_node_file()
        self._log_ready()
        keepers = [loop.create_task(self._keep_running(slot)) for slot in self.slots]
        await self._stop.wait()
        logger.info("draining: stopping %d shards", len(self.slots))
        self._stopping = True
        for task in keepers:
            task.cancel()
        code = await self._shutdown()
        if self.membership is not None:
            # After the drain: while the shards hand their leaderships over,
            # peers and clients still see this node as a member.
            logger.info("announcing that this node stopped (it keeps its place)")
            await self.membership.leave()
        if admin is not None:
            await admin.close()
        logger.info("laminar-node stopped (exit %d)", code)
        return code

    async def _spawn(self, slot: ShardProcess) -> None:
        """Start shard `slot`'s process; raise `OSError` (nothing left behind) if
        it cannot be started."""
        assert self.sockets is not None and self.steering is not None
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = self._popen(slot, child)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        try:
            await slot.attach(proc, parent)
        except BaseException:
            proc.kill()
            proc.wait()
            parent.close()
            raise

    def _popen(self, slot: ShardProcess, child: socket.socket) -> subprocess.Popen[bytes]:
        assert self.sockets is not None and self.steering is not None
        steering = self.steering
        fds: dict[str, int | None] = {
            **self.sockets.shards[slot.shard_id].fds(),
            "node_udp": steering.udp_fd(slot.shard_id),
        }
        settings = {**steering.shard_settings(), "mode": steering.mode}
        config = self.config.with_updates(extra={**self.config.extra, "steering": settings})
        args = [
            sys.executable,
            "-m",
            "laminar.shards.shard_main",
            "--shard-id",
            str(slot.shard_id),
            "--parent-pid",
            str(os.getpid()),
            "--config",
            config.to_json(),
            "--fds",
            json.dumps(fds),
            "--control-fd",
            str(child.fileno()),
            "--runtime",
            self.runtime,
            "--node-port",
            str(self.sockets.port),
            "--shard-ports",
            ",".join(map(str, self.sockets.shard_ports)),
            "--kafka-ports",
            ",".join(map(str, self.sockets.kafka_ports)),
        ]
        if self.admin_sock is not None:
            args += ["--admin-port", str(self.admin_sock.getsockname()[1])]
        # Exactly the shard's sockets: never the steering's BPF program or map,
        # which a shard has no use for (least privilege).
        pass_fds = {fd for fd in fds.values() if fd is not None}
        pass_fds.add(child.fileno())
        return subprocess.Popen(args, pass_fds=sorted(pass_fds), close_fds=True)

    async def _await_start(self) -> str | None:
        """Wait for every shard's READY; the reason start-up failed, if it did."""
        assert self._stop is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT_S
        stop = asyncio.ensure_future(self._stop.wait())
        while not stop.done():
            waits: list[asyncio.Future[Any]] = [
                s.ready for s in self.slots if s.ready is not None and not s.ready.done()
            ]
            if not waits or any(
                s.ready is not None and s.ready.done() and s.ready.exception() is not None
                for s in self.slots
            ):
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await asyncio.wait(
                [*waits, stop], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        stop.cancel()
        if self._stop.is_set():
            return "interrupted during start-up"
        for slot in self.slots:
            ready = slot.ready
            assert ready is not None
            if ready.done() and ready.exception() is not None:
                code = slot.exited.result() if slot.exited and slot.exited.done() else "?"
                return (
                    f"shard {slot.shard_id} exited during start-up (code {code}); "
                    "see its log lines above"
                )
            if not ready.done():
                return f"shard {slot.shard_id} did not become ready in {READY_TIMEOUT_S:.0f} s"
        return None

    async def _keep_running(self, slot: ShardProcess) -> None:
        """Restart the shard whenever it exits while the node runs."""
        while True:
            assert slot.exited is not None
            code = await asyncio.shield(slot.exited)
            slot.close_control()
            if self._stopping:
                return
            ran_s = time.monotonic() - slot.started_at
            slot.crashes_in_a_row = 1 if ran_s > STABLE_AFTER_S else slot.crashes_in_a_row + 1
            delay = RESTART_BACKOFF_S[min(slot.crashes_in_a_row, len(RESTART_BACKOFF_S)) - 1]
            logger.error(
                "shard %d (pid %s) exited with code %d after %.1f s; restarting in %.1f s",
                slot.shard_id,
                slot.pid,
                code,
                ran_s,
                delay,
            )
            await asyncio.sleep(delay)
            if not await self._restart(slot):
                return
            assert slot.ready is not None
            with contextlib.suppress(Exception):
                await slot.ready
                self._send_view(slot)
                logger.info("shard %d restarted (pid %s)", slot.shard_id, slot.pid)
                await self._write_node_file()

    async def _restart(self, slot: ShardProcess) -> bool:
        """Start the shard's process again, retrying with backoff while it cannot
        be started; False if the node began to stop meanwhile."""
        while not self._stopping:
            try:
                await self._spawn(slot)
            except OSError as exc:
                slot.start_error = f"cannot start shard {slot.shard_id}: {exc}"
                slot.crashes_in_a_row += 1
                delay = RESTART_BACKOFF_S[min(slot.crashes_in_a_row, len(RESTART_BACKOFF_S)) - 1]
                logger.error("%s; retrying in %.1f s", slot.start_error, delay)
                await asyncio.sleep(delay)
                continue
            slot.start_error = None
            slot.restarts += 1
            return True
        return False

    async def _shutdown(self) -> int:
        """SIGTERM every shard, wait for the drains (bounded), SIGKILL the rest."""
        self._stopping = True
        for slot in self.slots:
            slot.signal(signal.SIGTERM)
        exits = [s.exited for s in self.slots if s.exited is not None]
        _, pending = await asyncio.wait(exits, timeout=SHUTDOWN_TIMEOUT_S)
        for slot in self.slots:
            if slot.exited is not None and slot.exited in pending:
                logger.error("shard %d did not drain in time; killing it", slot.shard_id)
                slot.signal(signal.SIGKILL)
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        code = 0
        for slot in self.slots:
            slot.close_control()
            # -SIGTERM: a shard still starting up when the drain began (its
            # handlers were not installed yet); it had nothing to drain.
            if (
                slot.exited is None
                or not slot.exited.done()
                or slot.exited.result() not in (0, -signal.SIGTERM)
            ):
                code = 1
        return code

    # -- membership ------------------------------------------------------------

    def _publish_view(self, view: MembershipView) -> None:
        """Every new membership view goes to every running shard."""
        frame = view_frame(view)
        for slot in self.slots:
            if slot.up:
                slot.send_control(frame)

    def _send_view(self, slot: ShardProcess) -> None:
        if self.membership is not None:
            slot.send_control(view_frame(self.membership.view()))

    # -- reporting -------------------------------------------------------------

    def node_info(self) -> dict[str, Any]:
        assert self.sockets is not None and self.steering is not None
        admin_port = self.admin_sock.getsockname()[1] if self.admin_sock is not None else None
        return {
            "node_id": self.config.node_id,
            "pid": os.getpid(),
            "host": self.config.host,
            "port": self.sockets.port,
            "shard_ports": self.sockets.shard_ports,
            "kafka_ports": self.sockets.kafka_ports,
            "admin_port": admin_port,
            "admin_host": self.config.admin_host,
            "cores": self.config.cores,
            "runtime": self.runtime,
            "routing_mode": self.steering.mode,
            "routing_detail": self.steering.detail,
            "udp": self.steering.mode != UDP_OFF,
            "shard_pids": [slot.pid for slot in self.slots],
            "data_dir": self.config.data_dir,
            "admin_token_file": os.path.join(self.config.run_dir, TOKEN_FILE),
            "membership_address": self.membership.address if self.membership else None,
            "peer_auth": self.config.peer_auth,
        }

    async def _write_node_file(self) -> None:
        path = os.path.join(self.config.run_dir, NODE_FILE)
        async with self._node_file_lock:  # shards restarting together share its temporary
            data = json.dumps(self.node_info(), indent=1).encode() + b"\n"
            await atomic_replace(SyscallBackend(), path, data)

    def _log_ready(self) -> None:
        info = self.node_info()
        logger.info(
            "laminar-node ready: node %s, port %d (%s), %d shards on ports %s, "
            "admin %s://%s:%s, runtime %s, routing %s, data %s",
            info["node_id"],
            info["port"],
            ("tls, " if self.tls is not None else "")
            + ("no udp" if self.steering and self.steering.mode == UDP_OFF else "tcp+udp"),
            info["cores"],
            ",".join(map(str, info["shard_ports"])),
            "https" if self.tls is not None else "http",
            info["admin_host"],
            info["admin_port"],
            info["runtime"],
            info["routing_mode"],
            info["data_dir"],
        )

    def _admin_source(self) -> AdminSource:
        return AdminSource(
            health=self._health,
            metrics=self._metrics,
            status=self._status,
            set_weight=self._set_weight,
        )

    async def _set_weight(self, weight: float) -> dict[str, Any]:
        """Announce `weight` by gossip (`laminar weight`): placement follows it."""
        if self.membership is None:
            raise AdminRefusal(409, "membership is off (start the node with a cluster secret)")
        try:
            self.membership.set_weight(weight)
        except SwimUsageError as exc:
            raise AdminRefusal(400, str(exc)) from None
        logger.info("weight set to %g", weight)
        return {"node_id": self.config.node_id, **self.membership.state()}

    async def _health(self) -> tuple[bool, dict[str, Any]]:
        stats = await self._gather()
        down = [slot.shard_id for slot in self.slots if not slot.up]
        offline = [
            {"shard": slot.shard_id, **part}
            for slot, s in zip(self.slots, stats, strict=True)
            if s is not None
            for part in s.get("partitions_offline", ())
        ]
        healthy = not down and not offline
        body: dict[str, Any] = {
            "status": "ok" if healthy else "degraded",
            "node_id": self.config.node_id,
            "shards": len(self.slots),
            "shards_down": down,
            "partitions_offline": offline,
            "routing_mode": self.steering.mode if self.steering else "",
        }
        errors = {str(s.shard_id): s.start_error for s in self.slots if s.start_error}
        if errors:
            body["start_errors"] = errors
        return healthy, body

    async def _gather(self) -> list[dict[str, Any] | None]:
        return list(await asyncio.gather(*(slot.stats() for slot in self.slots)))

    async def _metrics(self) -> str:
        stats = await self._gather()
        samples = [
            ShardSample(slot.shard_id, slot.up, slot.restarts, s)
            for slot, s in zip(self.slots, stats, strict=True)
        ]
        extra = self.steering.metrics() if self.steering is not None else []
        if self.membership is not None:
            extra = [*extra, *self.membership.metrics()]
        return render(self.node_info(), samples, extra)

    async def _status(self) -> dict[str, Any]:
        stats = await self._gather()
        info = self.node_info()
        if self.steering is not None:
            info.update(self.steering.state())
        membership = self.membership
        info["members"] = membership.view().to_json() if membership is not None else []
        info["membership"] = membership.state() if membership is not None else None
        info["shards"] = [
            {
                "shard_id": slot.shard_id,
                "pid": slot.pid,
                "up": slot.up,
                "restarts": slot.restarts,
                "start_error": slot.start_error,
                "port": info["shard_ports"][slot.shard_id],
                "stats": s,
            }
            for slot, s in zip(self.slots, stats, strict=True)
        ]
        return info
