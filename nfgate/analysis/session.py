"""Starting Spark for ``nfgate analyze``, and Spark's failures told in one line.

Spark's JVM writes its log on the stderr it inherits: at start-up a few warnings, and
when it cannot start or a job fails, pages of Java stack traces. The command's output
is one line, so the JVM is started with its stderr sent to a log file
(:func:`start`); a failure is reported by its cause (the Java exception's message,
:func:`reason`) and names that file, which is kept. Java itself is blamed only when
it is missing or older than Spark needs (:func:`java_problem`).

Checks made before a JVM starts, since Spark's own come late or slowly
(:func:`precheck`): YARN without its configuration directory, and a standalone master
that does not accept a connection (Spark tries to register with it three times, 20
seconds apart, a wait no setting shortens).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nfgate.errors import ConfigError

__all__ = [
    "JAVA_MIN",
    "PROBE_S",
    "check_conf",
    "java_problem",
    "log_note",
    "precheck",
    "python_env",
    "reason",
    "start",
]

JAVA_MIN = 17  # Spark 4's minimum
PROBE_S = 5.0  # how long a standalone master has to accept a connection


def precheck(master: str, environ: Mapping[str, str] = os.environ) -> None:
    """Raise :class:`ConfigError` (one line) for a master Spark would refuse late:
    ``yarn`` without ``HADOOP_CONF_DIR`` or ``YARN_CONF_DIR`` naming a folder with
    ``yarn-site.xml``, and a ``spark://``
    master none of whose addresses accepts a TCP connection within PROBE_S."""
    if master == "yarn":
        dirs = [d for d in (environ.get("HADOOP_CONF_DIR"), environ.get("YARN_CONF_DIR")) if d]
        if not dirs:
            raise ConfigError(
                "analyze: --master yarn needs HADOOP_CONF_DIR or YARN_CONF_DIR set "
                "(the directory of the cluster's configuration)"
            )
        # Without yarn-site.xml the YARN client retries 0.0.0.0:8032 for ever: no error.
        if not any((Path(d) / "yarn-site.xml").is_file() for d in dirs):
            raise ConfigError(
                f"analyze: --master yarn: no yarn-site.xml in {' or '.join(dirs)} "
                "(HADOOP_CONF_DIR, YARN_CONF_DIR: the directory of the cluster's configuration)"
            )
    if not master.startswith("spark://"):
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):  # spark://h1:7077,h2:7077 for HA
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"analyze: --master {master}: expected spark://HOST:PORT")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S):
                return
        except OSError as exc:
            failures.append(f"{address}: {exc.strerror or exc}")
    raise ConfigError(f"analyze: cannot reach the Spark master {master} ({'; '.join(failures)})")


def check_conf(conf: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` for a property that cannot apply to a context created
    from Python: ``spark.pyspark.driver.python`` (the driver is this process)."""
    if "spark.pyspark.driver.python" in conf:
        raise ConfigError(
            "analyze: --conf spark.pyspark.driver.python cannot apply: the driver is this nfgate "
            "process; run nfgate with that Python instead"
        )


@contextlib.contextmanager
def python_env(conf: Mapping[str, str], *, local: bool = False) -> Iterator[None]:
    """While the context starts, ``PYSPARK_PYTHON`` from ``--conf spark.pyspark.python``;
    with a ``local`` master and neither that nor ``PYSPARK_PYTHON`` set, this process's
    own Python (pyspark would run ``python3`` from ``PATH``, which outside the venv has
    no nfgate, pyarrow or pyspark).

    pyspark reads the executors' Python from that variable when the context is created
    from Python, not from the property (which only spark-submit turns into the
    variable)."""
    python = conf.get("spark.pyspark.python")
    if python is None and local and "PYSPARK_PYTHON" not in os.environ:
        python = sys.executable
    if python is None:
        yield
        return
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:  # the context has read it; the process is left as it was
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


@contextlib.contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    """File descriptor 2 into ``log`` meanwhile: a JVM launched now keeps it for life."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def start(builder: Any, master: str, log: Path) -> Any:
    """``builder.getOrCreate()`` with the JVM's stderr in ``log``, and its SQL session
    built at once, so that a bad ``--conf spark.sql...`` value fails here rather than
    mid-job. Raises :class:`ConfigError` (one line): the cause, Java's version when
    that is the problem, and the log's name."""
    spark = None
    try:
        with _stderr_to(log):
            spark = builder.getOrCreate()
            spark.conf.get("spark.sql.session.timeZone")  # builds the session state
    except Exception as exc:  # pyspark's, Py4J's and Java's exceptions alike: one line
        cause = reason(exc, log)
        _stop(spark)  # or the next start in this process gets the same context, bad setting and all
        java = java_problem()
        tail = f"; {java}" if java else ""
        raise ConfigError(f"analyze: cannot start Spark on {master} ({cause}){tail}{log_note(log)}") from None
    return spark


def _stop(spark: Any) -> None:
    from pyspark import SparkContext

    with contextlib.suppress(Exception):  # a JVM that never started has nothing to stop
        if spark is not None:
            spark.stop()
        active = SparkContext._active_spark_context
        if active is not None:
            active.stop()


def log_note(log: Path) -> str:
    """``; Spark's log: PATH`` when the JVM wrote anything there, else nothing."""
    try:
        return f"; Spark's log: {log}" if log.stat().st_size else ""
    except OSError:
        return ""


def reason(exc: BaseException, log: Path | None = None) -> str:
    """A Spark failure's cause in one line: the Java exception's message (with its root
    cause's when that differs), the last line of a Python worker's traceback, or, for
    a JVM that exited before it started, what its launcher said in ``log``."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None:
        with contextlib.suppress(Exception):  # the JVM may be gone: then the Python text
            chain = _java_chain(java)
            if chain:
                return _join(chain)
    text = str(exc)
    if "JAVA_GATEWAY_EXITED" in text and log is not None:
        said = _launcher_said(log)
        if said:
            return said
    return _line(text) or type(exc).__name__


def _line(text: str) -> str:
    """A message's first line; a Python traceback's last (where the error is)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].startswith("Traceback") or "PythonException: Traceback" in lines[0]:
        return lines[-1]
    return lines[0][:300]


def _java_chain(java: Any) -> list[str]:
    chain: list[str] = []
    while java is not None and len(chain) < 20:
        message = java.getMessage()
        chain.append(_line(str(message)) if message else str(java.getClass().getSimpleName()))
        java = java.getCause()
    return chain


def _join(chain: list[str]) -> str:
    top, root = chain[0], chain[-1]
    # The most telling form of the root cause: "Connection refused: /127.0.0.1:1"
    # rather than the bare "Connection refused" below it.
    cause = next(c for c in [*chain[1:], root] if c.startswith(root))
    if cause == top or not cause:
        return top
    return f"{top.rstrip(' .:')}: {cause}"


def _launcher_said(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    for line in lines:
        if line.startswith("Exception in thread"):
            return re.sub(r'^Exception in thread "[^"]*" ', "", line)
    # Else the first line that is not Spark's start-up chatter: the launcher's own error
    # ("spark-class: line 71: /opt/jdk/bin/java: No such file or directory") comes first.
    errors = [line for line in lines if not _CHATTER.match(line)]
    return errors[0] if errors else ""


_CHATTER = re.compile(
    r"at |\.\.\.|WARNING:|Using Spark's|Setting default log level|To adjust logging level"
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (INFO|WARN)"
)


def java_problem(environ: Mapping[str, str] = os.environ) -> str | None:
    """What is wrong with the Java Spark would run (``$JAVA_HOME/bin/java``, else
    ``java`` on PATH), or None when it is there and recent enough."""
    home = environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java", path=environ.get("PATH"))
    where = "JAVA_HOME" if home else "PATH"
    if java is None or not Path(java).is_file():
        return f"Spark needs Java {JAVA_MIN} or later, and there is no java in {where}"
    try:
        proc = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Spark needs Java {JAVA_MIN} or later, and {java} does not run ({exc})"
    found = re.search(r'version "(\d+)(?:\.(\d+))?', proc.stderr + proc.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0_392": Java 8
        major = int(found.group(2))
    if major < JAVA_MIN:
        return f"Spark needs Java {JAVA_MIN} or later, and {java} is Java {major}"
    return None
