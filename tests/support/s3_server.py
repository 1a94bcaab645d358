"""An S3-compatible server for the table store's object-storage tests, started once and shared
by the test processes (tests/support/services.py), stopped by the last one.

The server is the Versity S3 Gateway (`versitygw posix`, an S3 server over a directory, used in
production as a gateway to POSIX storage): `make test` builds it from the
Go module proxy into `.s3-test/bin/versitygw` (scripts/versitygw.sh; or `MEMFLOW_VERSITYGW`, or
`versitygw` on PATH). SeaweedFS (`weed server -s3`) is used instead where its binary is built
(`make s3-seaweedfs`, 20-60 minutes here; or `MEMFLOW_WEED`, or `weed` on PATH). Both speak the
S3 REST API with conditional writes (``If-None-Match``), which delta-rs's commits rely on for
mutual exclusion on object storage; the contract suite passes on each. moto's server (an
emulator from PyPI) only when asked for, `MEMFLOW_TEST_S3_SERVER=moto`: with no real server
built the tests fail, they do not fall back. The port is `MEMFLOW_S3_PORT` (default 18555;
SeaweedFS also takes the next three for its master, volume and filer, and those +10000 for
their gRPC).

`MEMFLOW_TEST_S3_URL` (with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`) points the tests at
a server someone else runs; it is never started or stopped here. A server that cannot be
started raises `ServiceUnavailable`: the tests fail, never skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.services import ServiceUnavailable, SharedService, pid_alive

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".s3-test"
DEFAULT_PORT = 18555
START_TIMEOUT_S = 60.0
ACCESS_KEY = "memflow-test"
SECRET_KEY = "memflow-test-secret"
REGION = "us-east-1"


def port() -> int:
    return int(os.environ.get("MEMFLOW_S3_PORT", str(DEFAULT_PORT)))


def endpoint() -> str:
    return os.environ.get("MEMFLOW_TEST_S3_URL") or f"http://127.0.0.1:{port()}"


def storage_options() -> dict[str, str]:
    """delta-rs's and polars' object-store options for the test server."""
    return {
        "aws_endpoint_url": endpoint(),
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        if os.environ.get("MEMFLOW_TEST_S3_URL")
        else ACCESS_KEY,
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        if os.environ.get("MEMFLOW_TEST_S3_URL")
        else SECRET_KEY,
        "aws_region": REGION,
        "aws_allow_http": "true",
    }


def _binary(name: str, setting: str) -> str | None:
    """A server's binary: the path in `setting`, the one scripts/ built into .s3-test/bin, or
    `name` on PATH."""
    built = STATE / "bin" / name
    return os.environ.get(setting) or (str(built) if built.exists() else None) or shutil.which(name)


def weed_binary() -> str | None:
    """SeaweedFS's server (scripts/seaweedfs.sh builds it)."""
    return _binary("weed", "MEMFLOW_WEED")


def versitygw_binary() -> str | None:
    """The Versity S3 Gateway (scripts/versitygw.sh builds it)."""
    return _binary("versitygw", "MEMFLOW_VERSITYGW")


def kind() -> str:
    """Which server the tests run against: seaweedfs, versitygw, or moto when asked for."""
    if os.environ.get("MEMFLOW_TEST_S3_SERVER") == "moto":
        return "moto"
    if weed_binary():
        return "seaweedfs"
    if versitygw_binary():
        return "versitygw"
    raise ServiceUnavailable(
        "no S3 server is built: run `bash scripts/versitygw.sh` (make test does), or set "
        "MEMFLOW_TEST_S3_SERVER=moto for moto's emulator"
    )


def _pid_file() -> Path:
    return STATE / f"server-{port()}.pid"


# What each real server names itself in its `Server` header: a server left on the port by
# another run (moto's, say) is not taken for the one asked for.
_SERVER_HEADER = {"versitygw": "versitygw", "seaweedfs": "seaweedfs"}


def _answers() -> bool:
    try:
        with urllib.request.urlopen(endpoint() + "/", timeout=2) as resp:
            status, server = resp.status, resp.headers.get("Server", "")
    except urllib.error.HTTPError as exc:  # 403 without credentials: it answers S3
        status, server = exc.code, exc.headers.get("Server", "")
    except (urllib.error.URLError, OSError):
        return False
    if status >= 500:
        return False
    try:
        expected = _SERVER_HEADER.get(kind())
    except ServiceUnavailable:
        return False
    return expected is None or expected in server.lower()


def _command(data: Path) -> list[str]:
    server = kind()
    if server == "versitygw":  # the keys come from the environment (_start), not argv
        bucket_root = data / "buckets"
        bucket_root.mkdir()
        return [
            str(versitygw_binary()), "--port", f"127.0.0.1:{port()}", "--quiet",
            "posix", str(bucket_root),
        ]  # fmt: skip
    if server == "seaweedfs":  # master, volume and filer on the next ports (gRPC: +10000)
        config = data / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "memflow",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        p = port()
        return [
            str(weed_binary()), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            f"-master.port={p + 1}", f"-volume.port={p + 2}", f"-filer.port={p + 3}",
            "-filer", "-s3", f"-s3.port={p}", f"-s3.config={config}",
            "-volume.max=0", "-master.volumeSizeLimitMB=64",
        ]  # fmt: skip
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port())]


def _start() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="s3-data-", dir=STATE))
    log = (STATE / f"server-{port()}.log").open("wb")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "MOTO_ALLOW_NONEXISTENT_REGION": "true",
        # versitygw's root user, under each name it reads (it prefers the *_ID ones)
        "ROOT_ACCESS_KEY": ACCESS_KEY,
        "ROOT_ACCESS_KEY_ID": ACCESS_KEY,
        "ROOT_SECRET_KEY": SECRET_KEY,
        "ROOT_SECRET_ACCESS_KEY": SECRET_KEY,
        "VGW_REGION": REGION,
    }
    proc = subprocess.Popen(
        _command(data), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    _pid_file().write_text(str(proc.pid))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceUnavailable(
                f"the {kind()} S3 server exited ({proc.returncode}):\n"
                + (STATE / f"server-{port()}.log").read_text(errors="replace")[-3000:]
            )
        if _answers():
            return
        time.sleep(0.2)
    _stop()
    raise ServiceUnavailable(f"the {kind()} S3 server did not answer on {endpoint()}")


def _stop() -> None:
    try:
        pid = int(_pid_file().read_text())
    except (OSError, ValueError):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        _pid_file().unlink(missing_ok=True)
        for data in STATE.glob("s3-data-*"):
            shutil.rmtree(data, ignore_errors=True)


def service() -> SharedService:
    return SharedService(
        name=f"s3-{port()}",
        state_dir=STATE,
        start=_start,
        stop=_stop,
        answers=_answers,
    )


def acquire() -> str:
    """The endpoint of a running server; starts one if none answers."""
    if not os.environ.get("MEMFLOW_TEST_S3_URL"):
        service().acquire()
    return endpoint()


def release() -> None:
    if not os.environ.get("MEMFLOW_TEST_S3_URL"):
        service().release()


def create_bucket(name: str) -> None:
    import boto3

    opts = storage_options()
    client = boto3.client(
        "s3",
        endpoint_url=opts["aws_endpoint_url"],
        aws_access_key_id=opts["aws_access_key_id"],
        aws_secret_access_key=opts["aws_secret_access_key"],
        region_name=REGION,
    )
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=name)


if __name__ == "__main__":  # `python -m tests.support.s3_server stop`: a left-over server
    if sys.argv[1:] == ["stop"]:
        _stop()
    else:
        print("usage: python -m tests.support.s3_server stop", file=sys.stderr)
        sys.exit(2)
