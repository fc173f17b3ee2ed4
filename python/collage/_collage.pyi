"""Type stubs of the native module `collage._collage` (re-exported by `collage`)."""

import os
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Io = Tuple[str, Tuple[int, ...], str]

class CollageError(Exception):
    """An error collage reported."""

    code: Optional[str]
    """The diagnostic code (`E0901`, ...), `None` for an internal error."""
    message: str
    """The first error's message."""
    rendered: str
    """Every error of the call, as the command line prints them."""
    diagnostics: List[Dict[str, str]]
    """Each error: `code`, `severity`, `message`, `rendered`."""

class CollageWarning(UserWarning):
    """A warning collage reported (the message is the rendered diagnostic)."""

class Model:
    """A loaded, type-checked model."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Optional[pathlib.Path]: ...
    @property
    def inputs(self) -> List[_Io]:
        """`(name, shape, dtype)` of each input, in order."""
    @property
    def outputs(self) -> List[_Io]:
        """`(name, shape, dtype)` of each output (`output0`, ...), in order."""
    def to_relay(self) -> str: ...

class Plan:
    """The partitions `partition` chose for a model."""

    @property
    def model(self) -> Model: ...
    @property
    def partitions(self) -> List[Dict[str, Any]]: ...
    @property
    def total_cost(self) -> Optional[float]:
        """The estimated cost in seconds."""
    @property
    def baselines(self) -> Dict[str, Optional[float]]: ...
    def report(self) -> Dict[str, Any]:
        """The report of `collage partition --format json`."""
    def to_relay(self) -> str:
        """The partitioned program, as `collage partition -o` writes it."""

class Session:
    """A compiled model, ready to run from any number of threads."""

    @property
    def inputs(self) -> List[_Io]: ...
    @property
    def outputs(self) -> List[_Io]: ...
    @property
    def threads(self) -> int: ...
    def run(self, feeds: Mapping[str, npt.NDArray[Any]]) -> List[npt.NDArray[Any]]:
        """Runs the model; one array per input, of its dtype and shape."""
    def time_native(self, feeds: Mapping[str, npt.NDArray[Any]], repeat: int = 100) -> float:
        """Mean seconds per run of a loop inside collage (no Python in the loop)."""

def load(
    source: Union[_Path, bytes, bytearray],
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    dims: Optional[Mapping[str, int]] = None,
    base_dir: Optional[_Path] = None,
    name: Optional[str] = None,
    *,
    format: Optional[str] = None,
) -> Model: ...
def partition(
    model: Model,
    targets: Optional[Sequence[str]] = None,
    rules: Sequence[_Path] = ...,
    costs: str = "analytic",
    *,
    baselines: bool = True,
    lower_bound: bool = True,
    prune: bool = False,
    threads: Optional[int] = None,
    seed: int = 0,
    cache_dir: Optional[_Path] = None,
    measure_budget: Optional[float] = None,
    cost_timeout: float = 60.0,
    tvm_compat: bool = False,
    simplify: bool = True,
    warm_candidates: bool = False,
) -> Plan: ...
def compile(
    model: Union[Model, Plan],
    threads: Optional[int] = None,
    *,
    backend: str = "auto",
    seed: int = 0,
    cache_dir: Optional[_Path] = None,
    compile_timeout: Optional[float] = None,
    simplify: bool = True,
) -> Session: ...
def bench(
    model: Union[Model, _Path],
    targets: Optional[Sequence[str]] = None,
    rules: Sequence[_Path] = ...,
    costs: str = "measure",
    *,
    threads: Optional[int] = None,
    seed: int = 0,
    cache_dir: Optional[_Path] = None,
    measure_budget: Optional[float] = None,
    run_budget: Optional[float] = None,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    cost_timeout: float = 60.0,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    dims: Optional[Mapping[str, int]] = None,
    format: Optional[str] = None,
    simplify: bool = True,
    warm_candidates: bool = False,
) -> Dict[str, Any]: ...
def backends() -> List[Dict[str, Any]]: ...
