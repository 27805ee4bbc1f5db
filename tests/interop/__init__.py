"""Interop tests: the real NorFab 0.25 client and workers against a broker (nfgate by default)."""
