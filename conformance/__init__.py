"""The conformance suite (``nfgate conformance``): numbered cases per protocol, role and
spec section, a runner that never hangs, and console/JSON/JUnit/HTML reports.
See docs/conformance.md."""
