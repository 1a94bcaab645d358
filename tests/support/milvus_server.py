"""A real Milvus standalone server for the tests: the `milvus` wheel's binary (2.3.x, etcd
embedded, local disk storage, RocksMQ), run by pid like scripts/gremlin-server.sh runs Java.

    python -m tests.support.milvus_server {start|stop|status} [--port P] [--data DIR]

The wheel's own `MilvusServer` keeps the server as a child of the Python process that started
it and kills it when that process exits; here the wheel only renders the configuration and
unpacks the binary, and the server runs detached (its own session), so pytest workers, `make`
and the kill -9 tests can share, stop and kill it by pid.

Layout under `.milvus-server/` (git-ignored): `bin/` the unpacked binary and its libraries
(once per wheel version), `data-<port>/` one server's configs, logs and storage (it survives
restarts; the test fixtures start the shared server on an empty one), `server-<port>.pid`.

Ports: the proxy (the gRPC port clients use) is MEMFLOW_MILVUS_PORT (default 18310); the
server's internal components take the next twelve (etcd, coordinators, nodes, metrics), so
keep port..port+12 free. Every port is bound explicitly: the wheel's default is to probe from
19530/2379/... upwards, which races with anything else starting on the host.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE_DIR = ROOT / ".milvus-server"
DEFAULT_PORT = 18310
PORTS_FREE_TIMEOUT_S = 30.0
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 15.0
# The template's port settings, in the order they take port+1, port+2, ...
_PORT_KEYS = (
    "proxy_internal_port",
    "etcd_port",
    "root_coord_port",
    "query_coord_port",
    "query_node_port",
    "index_coord_port",
    "index_node_port",
    "data_coord_port",
    "data_node_port",
)
_METRICS_OFFSET = 11
_PEER_OFFSET = 12  # the embedded etcd's peer port


class MilvusServerError(RuntimeError):
    pass


def port() -> int:
    return int(os.environ.get("MEMFLOW_MILVUS_PORT", str(DEFAULT_PORT)))


@dataclass(frozen=True)
class MilvusServer:
    """One server: its proxy port and its data directory (default .milvus-server/data-<port>)."""

    port: int
    data_dir: Path

    @classmethod
    def default(cls, at_port: int | None = None, data_dir: Path | None = None) -> MilvusServer:
        p = at_port or port()
        return cls(p, (data_dir or STATE_DIR / f"data-{p}").resolve())

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_port(self) -> int:
        return self.port + _METRICS_OFFSET

    @property
    def pidfile(self) -> Path:
        return STATE_DIR / f"server-{self.port}.pid"

    @property
    def log(self) -> Path:
        return self.data_dir / "logs" / "milvus-stderr.log"

    # -- state ----------------------------------------------------------------------------

    def pid(self) -> int | None:
        """The pid in the pid file if it is this server's process (not a stale file, not a
        reused pid)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            cwd = os.readlink(f"/proc/{pid}/cwd")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            return None
        if Path(cwd) != self.data_dir or b"standalone" not in cmdline:
            return None
        return pid

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2
            ) as resp:
                return b"OK" in resp.read()
        except OSError:
            return False

    def answers(self, timeout: float = 10.0) -> bool:
        """A real request through pymilvus (list collections), not just an open port."""
        if not self.healthy():
            return False
        from pymilvus import MilvusClient

        try:
            client = MilvusClient(uri=self.uri, timeout=timeout)
        except Exception:
            return False
        try:
            client.list_collections()
            return True
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                client.close()

    # -- start / stop ---------------------------------------------------------------------

    def _prepare(self) -> tuple[Path, dict[str, str]]:
        """Renders configs/milvus.yaml into the data dir and unpacks the binary; returns the
        executable and its environment."""
        try:
            import milvus  # the wheel: config template + compressed binaries
        except ImportError as exc:
            raise MilvusServerError(
                "the `milvus` wheel is not installed (the dev extra has it: make .venv/.installed)"
            ) from exc

        STATE_DIR.mkdir(parents=True, exist_ok=True)
        config = milvus.MilvusServerConfig()
        ports = {"proxy_port": self.port}
        ports.update({key: self.port + 1 + i for i, key in enumerate(_PORT_KEYS)})
        config.update(data_dir=str(self.data_dir), **ports)
        for key, value in ports.items():
            config.set(key, value)
        # Stop within seconds on SIGTERM (the template waits up to 30 minutes).
        config.set("common.gracefulStopTimeout", 10)
        # Not config.resolve(): its port check binds without SO_REUSEADDR, so it refuses a port
        # that a server killed a moment ago left in TIME_WAIT (a restart after kill -9).
        ports_of_ours = range(self.port, self.port + _PEER_OFFSET + 1)
        busy = [p for p in ports_of_ours if _listening(p)]
        # A server killed a moment ago (kill -9 in the fault tests) may hold a port or two for a
        # few seconds after its main process is gone: wait for them before giving up.
        deadline = time.monotonic() + PORTS_FREE_TIMEOUT_S
        while busy and time.monotonic() < deadline:
            time.sleep(0.25)
            busy = [p for p in ports_of_ours if _listening(p)]
        if busy:
            raise MilvusServerError(f"ports {busy} already listen; choose MEMFLOW_MILVUS_PORT")
        config.resolve_storage()
        config.write_config()  # data_dir/configs/milvus.yaml
        self._embedded_etcd_ports()
        shared = STATE_DIR / f"bin-{milvus.__version__}"
        with _flock(STATE_DIR / "unpack.lock"):
            milvus._initialize_data_files(str(shared))  # no-op when already unpacked
        exe = shared / "bin" / "milvus"
        env = {
            **os.environ,
            "DEPLOY_MODE": "STANDALONE",
            "METRICS_PORT": str(self.metrics_port),
            "MILVUS_RUN_DIR": str(self.data_dir / "run"),
            "LD_LIBRARY_PATH": f"{exe.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        }
        return exe, env

    def _embedded_etcd_ports(self) -> None:
        """The embedded etcd listens on 2379/2380 whatever `etcd.endpoints` says unless it gets
        a config file of its own (`etcd.config.path`, absent from the wheel's template): two
        servers on one host would fight over those ports."""
        client, peer = self.port + 1 + _PORT_KEYS.index("etcd_port"), self.port + _PEER_OFFSET
        etcd_conf = self.data_dir / "configs" / "etcd.yaml"
        etcd_conf.write_text(
            "name: default\n"
            f"listen-client-urls: http://127.0.0.1:{client}\n"
            f"advertise-client-urls: http://127.0.0.1:{client}\n"
            f"listen-peer-urls: http://127.0.0.1:{peer}\n"
            f"initial-advertise-peer-urls: http://127.0.0.1:{peer}\n"
            f"initial-cluster: default=http://127.0.0.1:{peer}\n"
        )
        conf = self.data_dir / "configs" / "milvus.yaml"
        text = conf.read_text()
        if "\netcd:\n" not in text:
            raise MilvusServerError(f"no etcd section in {conf}")
        section = f"\netcd:\n  config:\n    path: {etcd_conf}\n"
        conf.write_text(text.replace("\netcd:\n", section, 1))

    def start(self, timeout_s: float = START_TIMEOUT_S, *, fresh: bool = False) -> None:
        """Starts the server unless ours already answers. `fresh`: on an empty data directory
        (what the tests ask for: a restarted 2.3 server reloads every collection it held before
        answering quickly, ~2-3 s each on the dev machine, and nothing in a test needs the last
        run's data)."""
        if self.pid() is not None and self.answers():
            return
        self.stop()
        if fresh and self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        if self.healthy():
            raise MilvusServerError(
                f"something else answers on port {self.metrics_port}; choose MEMFLOW_MILVUS_PORT"
            )
        exe, env = self._prepare()
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (
            open(logs / "milvus-stdout.log", "ab") as out,
            open(logs / "milvus-stderr.log", "ab") as err,
        ):
            proc = subprocess.Popen(
                [str(exe), "run", "standalone"],
                cwd=self.data_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # outlives the process that started it
            )
        self.pidfile.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pidfile.unlink(missing_ok=True)
                raise MilvusServerError(
                    f"Milvus server exited with {proc.returncode} during start-up: {self._tail()}"
                )
            if self.answers(timeout=5):
                return
            time.sleep(0.5)
        self.stop()
        raise MilvusServerError(
            f"Milvus server at {self.uri} did not answer within {timeout_s:.0f} s: {self._tail()}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM, then SIGKILL after `timeout_s`; True if a server was running."""
        pid = self.pid()
        self.pidfile.unlink(missing_ok=True) if pid is None else None
        if pid is None:
            return False
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _running(pid):
                time.sleep(0.2)
            if not _running(pid):
                break
        self.pidfile.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """kill -9, for the fault tests; the pid file stays (stale) as after a crash."""
        pid = self.pid()
        if pid is None:
            raise MilvusServerError(f"no Milvus server of ours runs at {self.uri}")
        os.kill(pid, signal.SIGKILL)
        while _running(pid):
            time.sleep(0.05)

    def _tail(self, size: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return "(no log)"


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
        return False
    return True


@contextlib.contextmanager
def _flock(path: Path):
    import fcntl

    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.milvus_server")
    parser.add_argument("command", choices=("start", "stop", "status"))
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--data", type=Path, default=None)
    args = parser.parse_args(argv)
    server = MilvusServer.default(args.port, args.data)
    if args.command == "start":
        try:
            server.start()
        except MilvusServerError as exc:
            print(f"milvus-server: {exc}", file=sys.stderr)
            return 1
        print(f"milvus-server: running (pid {server.pid()}) at {server.uri}")
        return 0
    if args.command == "stop":
        print("milvus-server: " + ("stopped" if server.stop() else "not running"))
        return 0
    ok = server.answers()
    print(f"milvus-server: {'running' if ok else 'not running'} at {server.uri}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
