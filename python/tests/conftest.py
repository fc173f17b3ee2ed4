"""Fixtures of the Python package's tests: the repository's models, the `collage` command the
results are compared with, and a cache directory of the test's own (never the user's)."""

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"

# Every kernel the tests compile goes into a directory of their own, whatever a test forgets to
# pass: `collage` reads COLLAGE_CACHE_DIR when no cache directory is given.
_CACHE = tempfile.mkdtemp(prefix="collage-pytest-")
os.environ["COLLAGE_CACHE_DIR"] = _CACHE


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def models():
    return MODELS


@pytest.fixture(scope="session")
def cache_dir():
    """A kernel cache shared by the tests of one session (inside the session's directory)."""
    d = pathlib.Path(_CACHE) / "kernels"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def collage_bin():
    """The `collage` command: $COLLAGE_BIN, else the release build of this checkout."""
    given = os.environ.get("COLLAGE_BIN")
    path = pathlib.Path(given) if given else ROOT / "target" / "release" / "collage"
    if not path.is_file():
        pytest.fail(f"no collage command at {path}: build it (cargo build --release) or set COLLAGE_BIN")
    return path


@pytest.fixture
def cli(collage_bin):
    """Runs the command; returns the completed process (stdout and stderr as text)."""

    def run(*args, check=True):
        p = subprocess.run(
            [str(collage_bin), *map(str, args)], capture_output=True, text=True, timeout=600
        )
        if check and p.returncode != 0:
            raise AssertionError(f"collage {' '.join(map(str, args))} failed:\n{p.stderr}")
        return p

    return run
