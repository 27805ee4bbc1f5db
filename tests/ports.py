"""Bind arguments that put every edge of ``nfgate serve`` on a random loopback port, so
tests never collide with each other or with a broker already running on the defaults."""

from __future__ import annotations

from nfgate.edges.kinds import KINDS


def random_binds() -> list[tuple[str, str]]:
    """``(edge kind, url)`` for every listening edge kind, port chosen by the OS."""
    return [(kind.kind, "tcp://127.0.0.1:*") for kind in KINDS.values() if kind.binds]


def random_bind_args(*, but: str = "") -> list[str]:
    """The same as ``nfgate serve`` options (``--bind EDGE=tcp://127.0.0.1:0`` each, and
    the metrics endpoint on a free port), leaving out edge ``but`` (bound by the caller)."""
    args: list[str] = ["--metrics", "http://127.0.0.1:0"]
    for kind, _ in random_binds():
        if kind != but:
            args += ["--bind", f"{kind}=tcp://127.0.0.1:0"]
    return args
