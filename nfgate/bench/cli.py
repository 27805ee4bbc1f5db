"""The ``nfgate bench`` command (placeholder until the benchmark lands)."""

from __future__ import annotations

import click


@click.command()
def bench() -> None:
    """Benchmark the gateway against a raw pyzmq relay and the NorFab broker."""
    raise click.ClickException("bench: not built yet")
