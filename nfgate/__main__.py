"""``python -m nfgate`` runs the command line (the benchmark and tests start the gateway this way)."""

from nfgate.cli import main

main()
