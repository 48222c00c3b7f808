"""An S3-API server for tests and the dev stack: S3Proxy from Maven Central (a thin shell).

S3Proxy (``org.gaul:s3proxy``, Apache-2.0) serves the S3 API over a local directory (its
``filesystem`` backend). hailstorm's snapshot store talks to it through s3fs exactly as it
would talk to Amazon S3, so what crosses that API is tested for real::

    with S3Server(workdir) as s3:
        s3.make_bucket("snapshots")
        os.environ.update(s3.client_env())  # AWS_* for s3fs/botocore, never on a command line
        store = open_store("s3://snapshots/prod")

The jar is fetched once with the machine's Maven into the cache of
:func:`hailstorm.config.cache_dir`. The server listens on 127.0.0.1 on a free port,
requires AWS signatures with a random key made here (written to a 0600 properties file,
never to a command line) and is stopped by its pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from hailstorm.config import cache_dir
from hailstorm.dev.services import free_port, listens
from hailstorm.errors import ServiceError

__all__ = ["S3PROXY_VERSION", "S3Server", "S3SetupError", "ensure_s3proxy_jar"]

S3PROXY_VERSION = "2.6.0"
_ARTIFACT = f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies"
REGION = "us-east-1"
COMPATIBLE_CHECKSUMS = {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
                        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}
"""botocore (1.36 on) adds CRC checksum headers to every upload unless told otherwise; S3
servers other than Amazon's (S3Proxy, older MinIO) refuse them as not implemented."""


class S3SetupError(ServiceError, RuntimeError):
    """S3Proxy could not be fetched or started."""


def ensure_s3proxy_jar() -> Path:
    """The S3Proxy jar, fetched from Maven Central on first use (then cached)."""
    jar = cache_dir() / f"s3proxy-{S3PROXY_VERSION}" / "s3proxy.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise S3SetupError("mvn not found: S3Proxy is fetched from Maven Central with Maven "
                           "(apt-get install maven)")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".fetch-") as work:
        result = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={_ARTIFACT}",
             f"-DoutputDirectory={work}", "-Dmdep.stripVersion=true"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        fetched = list(Path(work).glob("s3proxy*.jar"))
        if result.returncode != 0 or len(fetched) != 1:
            detail = next((line.strip() for line in (result.stdout + result.stderr).splitlines()
                           if "ERROR" in line), f"exit {result.returncode}")
            raise S3SetupError(f"fetching S3Proxy {S3PROXY_VERSION} with Maven failed "
                               f"({detail}); check that Maven Central is reachable")
        fetched[0].rename(jar)
    return jar


class S3Server:
    """One S3Proxy process over a directory of ``workdir`` (context manager)."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 60.0) -> None:
        self.workdir = Path(workdir)
        self.startup_timeout = startup_timeout
        self.port = 0
        self.access_key = "hailstorm"
        self.secret_key = secrets.token_hex(20)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_env(self) -> dict[str, str]:
        """The environment s3fs (botocore) needs to reach this server."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true", **COMPATIBLE_CHECKSUMS}

    def start(self) -> S3Server:
        jar = ensure_s3proxy_jar()
        java = shutil.which("java")
        if java is None:
            raise S3SetupError("java not found: S3Proxy runs on the JVM (apt-get install "
                               "default-jre-headless)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        properties = self.workdir / "s3proxy.properties"
        fd = os.open(properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join([
                f"s3proxy.endpoint=http://127.0.0.1:{self.port}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={self.access_key}",
                f"s3proxy.credential={self.secret_key}",
                "jclouds.provider=filesystem",
                f"jclouds.filesystem.basedir={data}",
                f"jclouds.regions={REGION}",
            ]) + "\n")
        with (self.workdir / "s3proxy.log").open("ab") as log:
            self.process = subprocess.Popen(
                [java, "-jar", str(jar), "--properties", str(properties)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.process.poll() is not None:
                raise S3SetupError(f"S3Proxy exited with {self.process.returncode}: "
                                   f"{self.log()[-2000:]}")
            if listens(self.port):
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise S3SetupError(f"S3Proxy did not listen on {self.port} within "
                                   f"{self.startup_timeout:.0f} s: {self.log()[-2000:]}")
            time.sleep(0.2)

    def log(self) -> str:
        path = self.workdir / "s3proxy.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def filesystem(self) -> Any:
        """An s3fs filesystem signed for this server (a fresh one, not the cached one)."""
        import s3fs

        return s3fs.S3FileSystem(key=self.access_key, secret=self.secret_key,
                                 client_kwargs={"endpoint_url": self.endpoint,
                                                "region_name": REGION},
                                 skip_instance_cache=True)

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (no error when this server already has it)."""
        fs = self.filesystem()
        try:
            fs.call_s3("create_bucket", Bucket=name)
        except (FileExistsError, PermissionError) as exc:  # s3fs' words for "already there"
            if "BucketAlready" not in type(exc.__cause__).__name__ and \
                    "already" not in str(exc).lower():
                raise

    def stop(self) -> None:
        """Stop the server by its pid (its process group: the JVM only)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
