"""collage from Python: load a model, partition it across backends, compile it and run it.

    >>> import collage, numpy as np
    >>> model = collage.load("tests/models/mnist.relay")
    >>> plan = collage.partition(model)
    >>> session = collage.compile(plan, threads=1)
    >>> (name, shape, dtype), = session.inputs
    >>> [out] = session.run({name: np.zeros(shape, dtype)})

Errors collage reports are raised as :class:`CollageError` (with the diagnostic's ``code`` and
``rendered`` text); warnings are issued as :class:`CollageWarning`. docs/python.md describes
the API.
"""

from ._collage import (
    CollageError,
    CollageWarning,
    Model,
    Plan,
    Session,
    __version__,
    backends,
    bench,
    compile,
    load,
    partition,
)

__all__ = [
    "CollageError",
    "CollageWarning",
    "Model",
    "Plan",
    "Session",
    "__version__",
    "backends",
    "bench",
    "compile",
    "load",
    "partition",
]
