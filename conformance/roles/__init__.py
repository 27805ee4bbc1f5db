"""One module per role the suite can play; each builds a :class:`Role`, registers it
with :func:`nfgate.conformance.registry.register_role` and registers its cases.
Modules whose name starts with ``_`` are shared helpers, not roles."""
