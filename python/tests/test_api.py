"""The Python API against the `collage` command: same plans, same reports, bit-identical
outputs; errors as exceptions with their codes; the GIL released while collage works."""

import json
import os
import pathlib
import re
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import collage

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Every dtype a session takes and gives: float16, int32, int64 and bool inputs; float16,
# int32, int64 and bool outputs.
TYPES_RELAY = """#[version = "0.0.5"]
def @main(%a: Tensor[(2, 3), float16], %b: Tensor[(3), int32], %c: Tensor[(2, 3), int64], %d: Tensor[(2, 3), bool]) {
  (add(%a, %a), multiply(%b, %b), add(%c, %c), where(%d, %c, %c), greater(%a, %a))
}
"""

UNSUPPORTED_RELAY = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  nn.frobnicate(%x)
}
"""


def feeds_for(inputs, seed=1):
    """Random arrays for (name, shape, dtype) inputs."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, dtype in inputs:
        if dtype == "bool":
            out[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif dtype.startswith("int"):
            out[name] = rng.integers(-50, 50, size=shape).astype(dtype)
        else:
            out[name] = rng.standard_normal(size=shape).astype(dtype)
    return out


def cli_outputs(cli, model_file, feeds, tmp, threads, cache_dir):
    """`collage run` on .npy inputs; its output files, in order."""
    args = ["run", model_file, "--threads", threads, "--cache-dir", cache_dir]
    for name, a in feeds.items():
        f = tmp / f"in-{name}.npy"
        np.save(f, a)
        args += ["--input", f"{name}={f}"]
    out = tmp / "out"
    cli(*args, "--output-dir", out)
    files = sorted(out.glob("output*.npy"), key=lambda p: int(p.stem[len("output"):]))
    return [np.load(f) for f in files]


def assert_identical(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def test_version_is_the_crates():
    cargo = (ROOT / "python" / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert collage.__version__ == version


def test_load_from_path_pathlike_and_bytes(models):
    path = models / "mnist.relay"
    by_str = collage.load(str(path))
    by_path = collage.load(path)
    by_bytes = collage.load(path.read_bytes(), name="mnist")
    expected_in = [("x", (1, 1, 28, 28), "float32")]
    expected_out = [("output0", (1, 10), "float32")]
    for m in (by_str, by_path, by_bytes):
        assert m.inputs == expected_in
        assert m.outputs == expected_out
    assert by_path.path == path and by_bytes.path is None and by_bytes.name == "mnist"
    assert by_str.to_relay() == by_bytes.to_relay()


def test_a_missing_file_raises_E0901(tmp_path):
    with pytest.raises(collage.CollageError) as e:
        collage.load(tmp_path / "nowhere.relay")
    assert e.value.code == "E0901"
    assert "nowhere.relay" in e.value.rendered and "E0901" in str(e.value)
    assert e.value.diagnostics[0]["code"] == "E0901"


def test_an_unsupported_operator_raises_its_code(tmp_path):
    f = tmp_path / "unsupported.relay"
    f.write_text(UNSUPPORTED_RELAY)
    with pytest.raises(collage.CollageError) as e:
        collage.load(f)
    assert e.value.code == "E0305"
    # The rendered text points into the file, as on the command line.
    assert "nn.frobnicate" in e.value.rendered and "unsupported.relay:3:3" in e.value.rendered


def test_bytes_that_are_not_utf8_raise_E0101():
    with pytest.raises(collage.CollageError) as e:
        collage.load(b"def @main() { \xff }", name="bad")
    assert e.value.code == "E0101"


def test_wrong_arguments_raise_type_and_value_errors(models):
    m = collage.load(models / "mnist.relay")
    with pytest.raises(TypeError):
        collage.load(42)
    with pytest.raises(ValueError):
        collage.load(models / "mnist.relay", base_dir=models)
    with pytest.raises(ValueError):
        collage.load(models / "mnist.relay", dims={"batch": -1})
    with pytest.raises(TypeError):
        collage.load(models / "mnist.relay", input_shapes={"x": "1x1x28x28"})
    with pytest.raises(ValueError):
        collage.partition(m, costs="no-such-estimator")
    with pytest.raises(TypeError):
        collage.partition(m, targets="dnnl")
    with pytest.raises(ValueError):
        collage.compile(m, threads=0)
    with pytest.raises(ValueError):
        collage.compile(m, backend="gpu")
    with pytest.raises(TypeError):
        collage.compile("mnist.relay")


def test_shapes_for_a_relay_model_raise_E0905(models):
    with pytest.raises(collage.CollageError) as e:
        collage.load(models / "mnist.relay", input_shapes={"x": (1, 1, 28, 28)})
    assert e.value.code == "E0905"


def test_an_unknown_target_raises_E0956(models):
    m = collage.load(models / "mnist.relay")
    with pytest.raises(collage.CollageError) as e:
        collage.partition(m, targets=["no-such-target"])
    assert e.value.code == "E0956"


@pytest.mark.parametrize("model", ["mnist", "gpt2_extract"])
def test_partition_report_and_program_equal_the_commands(model, models, cli, tmp_path):
    path = models / f"{model}.relay"
    out = tmp_path / "partitioned.relay"
    theirs = json.loads(cli("partition", path, "--format", "json", "-o", out).stdout)
    plan = collage.partition(collage.load(path))
    ours = plan.report()
    for r in (ours, theirs):
        del r["stats"]["elapsed_ms"]
    assert ours == theirs
    assert plan.to_relay() == out.read_text()
    f = theirs["functions"][0]
    assert plan.total_cost == f["total_cost"]
    assert plan.partitions == f["partitions"]
    assert plan.baselines == f["baselines"]


def test_partition_options_reach_the_pipeline(models, cli):
    path = models / "mnist.relay"
    theirs = json.loads(
        cli("partition", path, "--format", "json", "--target", "tvm_cpu", "--target", "dnnl", "--no-baselines").stdout
    )
    ours = collage.partition(collage.load(path), targets=["tvm_cpu", "dnnl"], baselines=False).report()
    for r in (ours, theirs):
        del r["stats"]["elapsed_ms"]
    assert ours == theirs
    assert ours["functions"][0]["baselines"] == {}


def test_warm_candidates_are_another_measurement(models, tmp_path):
    m = collage.load(models / "mnist.relay")

    def stats(**kw):
        plan = collage.partition(m, targets=["tvm_cpu"], costs="measure", threads=1,
                                 cache_dir=tmp_path, measure_budget=0.05, **kw)
        return plan.report()["stats"]["measure"]

    first = stats()
    assert first["measured"] > 0 and first["cached"] == 0
    warm = stats(warm_candidates=True)
    assert warm["cached"] == 0 and warm["measured"] == first["measured"]
    again = stats()
    assert again["measured"] == 0 and again["cached"] == first["measured"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model", ["mnist", "batch_norm_extract"])
def test_run_is_bit_identical_to_the_command(model, threads, models, cli, tmp_path, cache_dir):
    path = models / f"{model}.relay"
    m = collage.load(path)
    feeds = feeds_for(m.inputs)
    session = collage.compile(m, threads=threads, cache_dir=cache_dir)
    ours = session.run(feeds)
    theirs = cli_outputs(cli, path, feeds, tmp_path, threads, cache_dir)
    assert_identical(ours, theirs)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_plan_runs_bit_identical_to_the_command(threads, models, cli, tmp_path, cache_dir):
    m = collage.load(models / "mnist.relay")
    plan = collage.partition(m)
    partitioned = tmp_path / "partitioned.relay"
    cli("partition", models / "mnist.relay", "-o", partitioned)
    feeds = feeds_for(m.inputs)
    ours = collage.compile(plan, threads=threads, cache_dir=cache_dir).run(feeds)
    theirs = cli_outputs(cli, partitioned, feeds, tmp_path, threads, cache_dir)
    assert_identical(ours, theirs)


def test_every_dtype_crosses(tmp_path, cli, cache_dir):
    f = tmp_path / "types.relay"
    f.write_text(TYPES_RELAY)
    m = collage.load(f)
    assert [i[2] for i in m.inputs] == ["float16", "int32", "int64", "bool"]
    feeds = feeds_for(m.inputs)
    ours = collage.compile(m, threads=1, cache_dir=cache_dir).run(feeds)
    assert [o.dtype.name for o in ours] == ["float16", "int32", "int64", "int64", "bool"]
    np.testing.assert_array_equal(ours[0], feeds["a"] + feeds["a"])
    np.testing.assert_array_equal(ours[1], feeds["b"] * feeds["b"])
    np.testing.assert_array_equal(ours[2], feeds["c"] + feeds["c"])
    assert not ours[4].any()
    theirs = cli_outputs(cli, f, feeds, tmp_path, 1, cache_dir)
    assert_identical(ours, theirs)


def test_reference_backend_gives_the_reference_interpreters_outputs(models, cli, tmp_path):
    path = models / "mnist.relay"
    m = collage.load(path)
    feeds = feeds_for(m.inputs)
    ours = collage.compile(m, threads=1, backend="reference").run(feeds)
    f = tmp_path / "x.npy"
    np.save(f, feeds["x"])
    out = tmp_path / "out"
    cli("run", path, "--backend", "reference", "--threads", 1, "--input", f"x={f}", "--output-dir", out)
    assert_identical(ours, [np.load(out / "output0.npy")])


@pytest.fixture(scope="module")
def mnist_session(cache_dir):
    m = collage.load(ROOT / "tests" / "models" / "mnist.relay")
    return collage.compile(m, threads=1, cache_dir=cache_dir)


def test_wrong_dtype_raises_E2304(mnist_session):
    with pytest.raises(collage.CollageError) as e:
        mnist_session.run({"x": np.zeros((1, 1, 28, 28), np.float64)})
    assert e.value.code == "E2304" and "float64" in e.value.message


def test_wrong_shape_raises_E2304(mnist_session):
    with pytest.raises(collage.CollageError) as e:
        mnist_session.run({"x": np.zeros((1, 28, 28), np.float32)})
    assert e.value.code == "E2304" and "(1, 28, 28)" in e.value.message


def test_unknown_input_name_raises_E2305(mnist_session):
    x = np.zeros((1, 1, 28, 28), np.float32)
    with pytest.raises(collage.CollageError) as e:
        mnist_session.run({"x": x, "y": x})
    assert e.value.code == "E2305" and "`y`" in e.value.message


def test_missing_input_raises_E3900(mnist_session):
    with pytest.raises(collage.CollageError) as e:
        mnist_session.run({})
    assert e.value.code == "E3900" and "`x`" in e.value.message


def test_feeds_of_the_wrong_kind_raise_type_errors(mnist_session):
    with pytest.raises(TypeError):
        mnist_session.run([np.zeros((1, 1, 28, 28), np.float32)])
    with pytest.raises(TypeError):
        mnist_session.run({"x": [[0.0] * 28] * 28})
    with pytest.raises(TypeError):
        mnist_session.run({1: np.zeros((1, 1, 28, 28), np.float32)})


def test_any_layout_gives_the_same_outputs(mnist_session):
    x = np.random.default_rng(3).standard_normal((1, 1, 28, 28)).astype(np.float32)
    [want] = mnist_session.run({"x": x})
    fortran = np.asfortranarray(np.random.default_rng(3).standard_normal((28, 28)).astype(np.float32))
    strided = np.zeros((1, 1, 28, 56), np.float32)
    strided[..., ::2] = x
    swapped = x.astype(x.dtype.newbyteorder(">"))
    for feed in (strided[..., ::2], swapped):
        [got] = mnist_session.run({"x": feed})
        assert got.tobytes() == want.tobytes()
    # Fortran order: same values, another layout.
    [a] = mnist_session.run({"x": fortran.reshape(1, 1, 28, 28, order="A")})
    [b] = mnist_session.run({"x": np.ascontiguousarray(fortran).reshape(1, 1, 28, 28)})
    assert a.tobytes() == b.tobytes()


def test_outputs_are_not_copied_and_belong_to_the_caller(mnist_session):
    x = np.ones((1, 1, 28, 28), np.float32)
    [a] = mnist_session.run({"x": x})
    # The array views collage's tensor: its base is the object that owns it.
    assert not a.flags["OWNDATA"] and type(a.base).__name__ == "OutputBuffer"
    keep = a.copy()
    a[:] = 0
    [b] = mnist_session.run({"x": x})
    assert b.tobytes() == keep.tobytes()


def test_a_returned_input_is_a_copy(tmp_path):
    f = tmp_path / "identity.relay"
    f.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  (%x, %x)\n}\n')
    s = collage.compile(collage.load(f), threads=1, backend="reference")
    x = np.arange(4, dtype=np.float32)
    a, b = s.run({"x": x})
    a[:] = -1
    np.testing.assert_array_equal(b, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32))


def test_one_session_from_several_threads(mnist_session):
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((1, 1, 28, 28)).astype(np.float32) for _ in range(8)]
    want = [mnist_session.run({"x": x})[0].tobytes() for x in xs]
    got = [None] * len(xs)

    def work(i):
        for _ in range(20):
            got[i] = mnist_session.run({"x": xs[i]})[0].tobytes()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == want


def test_two_sessions_run_at_once_from_two_threads(models, cache_dir):
    # Reference-interpreter sessions of a model that takes a while to run: if `run` held the
    # GIL, the second thread could not even read the clock before the first run ended.
    m = collage.load(models / "mobilenet.relay")
    sessions = [collage.compile(m, threads=1, backend="reference") for _ in range(2)]
    feeds = feeds_for(m.inputs)
    spans = [None, None]
    barrier = threading.Barrier(2)
    # No forced switches between threads: a thread gives the GIL up only where it blocks, so
    # the other one can start its run only if the first one's `run` released the GIL.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)

    def work(i):
        barrier.wait()
        t0 = time.perf_counter()
        sessions[i].run(feeds)
        spans[i] = (t0, time.perf_counter())

    try:
        ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    (a0, a1), (b0, b1) = spans
    assert max(a0, b0) < min(a1, b1), f"the runs did not overlap: {spans}"


def test_partitioning_releases_the_gil(models):
    m = collage.load(models / "gpt2.relay")
    done = []
    t = threading.Thread(target=lambda: done.append(collage.partition(m, baselines=False)))
    ticks = 0
    t.start()
    while t.is_alive():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert done, "partition failed"
    # Partitioning GPT-2 takes well over 20 ms; the loop ran all along.
    assert ticks >= 20, ticks


def test_warnings_are_collage_warnings_and_errors_follow(tmp_path):
    # A target without a cost block: W2107, then no target can run the operator (E2101).
    rules = tmp_path / "acc.rules"
    rules.write_text(
        "target host { host = true; device = cpu; }\n"
        'target acc { device = cpu; compiler = "acc"; patterns = [ "acc.relu" = nn.relu(_) ]; }\n'
    )
    f = tmp_path / "relu.relay"
    f.write_text('#[version = "0.0.5"]\ndef @main(%x: Tensor[(4), float32]) {\n  nn.relu(%x)\n}\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(collage.CollageError) as e:
            collage.partition(collage.load(f), rules=[rules])
    assert e.value.code == "E2101" and "relu.relay:3:3" in e.value.rendered
    assert [w.category for w in caught] == [collage.CollageWarning]
    assert "warning[W2107]" in str(caught[0].message)


def test_backends_lists_the_registry(cli):
    ours = collage.backends()
    theirs = json.loads(cli("backends", "--format", "json").stdout)["backends"]
    assert [b["name"] for b in ours] == [b["name"] for b in theirs]
    assert ours[0]["name"] == "reference" and ours[0]["available"]


def test_bench_returns_the_commands_report(models, cli, tmp_path, cache_dir):
    path = models / "mnist.relay"
    ours = collage.bench(
        path, costs="analytic", threads=1, cache_dir=cache_dir, run_budget=0.05
    )
    theirs = json.loads(
        cli("bench", path, "--costs", "analytic", "--threads", 1, "--cache-dir", cache_dir,
            "--run-budget", 0.05, "--format", "json").stdout
    )
    assert set(ours) == set(theirs)
    assert ours["targets"] == theirs["targets"]
    assert [p["name"] for p in ours["placements"]] == [p["name"] for p in theirs["placements"]]
    assert [p["status"] for p in ours["placements"]] == [p["status"] for p in theirs["placements"]]
    assert ours["partition"]["total_cost"] == theirs["partition"]["total_cost"]
    with pytest.raises(ValueError):
        collage.bench(collage.load(path.read_bytes()))


def test_time_native_times_runs_inside_collage(mnist_session):
    """`time_native` runs the session in a loop inside collage and gives seconds per run; the
    calling overhead of `run` measured against it is a figure for docs/performance.md, not a
    test (timings are not tests)."""
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)}
    native = mnist_session.time_native(feeds, 50)
    assert isinstance(native, float) and 0.0 < native < 1.0, native
    first = mnist_session.run(feeds)
    again = mnist_session.run(feeds)
    assert [a.tolist() for a in first] == [b.tolist() for b in again]
    with pytest.raises(ValueError):
        mnist_session.time_native(feeds, 0)
