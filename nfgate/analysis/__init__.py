"""The capture pipeline's analysis side: ``nfgate analyze`` (docs/pipeline.md).

:mod:`~nfgate.analysis.classify` is pure (one captured message -> one commands row);
:mod:`~nfgate.analysis.inputs` checks segments before Spark reads them (pyarrow, or
Spark's filesystem layer for a URI); :mod:`~nfgate.analysis.session` starts Spark and
tells its failures in one line; :mod:`~nfgate.analysis.job` and
:mod:`~nfgate.analysis.queries` need pyspark, :mod:`~nfgate.analysis.report`
matplotlib (``pip install 'nfgate[spark]'``).
"""
