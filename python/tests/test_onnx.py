"""ONNX models through the same API: shapes bound at load, external data from bytes with a
base directory, outputs bit-identical to `collage run` and close to ONNX Runtime's (the
fixtures' recorded outputs), unsupported operators as exceptions with their code."""

import json
import pathlib

import numpy as np
import pytest

import collage

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "onnx"


def manifest(name):
    d = FIXTURES / name
    return d, json.loads((d / "manifest.json").read_text())


def feeds_of(d, m):
    return {i["name"]: np.load(d / i["file"]) for i in m["inputs"]}


def expected_of(d, m):
    return [np.load(d / o["file"]) for o in m["outputs"]]


def cli_run(cli, model, feeds, tmp, threads, cache_dir, *flags):
    args = ["run", model, "--threads", threads, "--cache-dir", cache_dir, *flags]
    for name, a in feeds.items():
        f = tmp / f"in-{name}.npy"
        np.save(f, a)
        args += ["--input", f"{name}={f}"]
    out = tmp / "out"
    cli(*args, "--output-dir", out)
    n = len(list(out.glob("output*.npy")))
    return [np.load(out / f"output{i}.npy") for i in range(n)]


@pytest.mark.parametrize("name", ["resnet_tiny-opset13", "bert_tiny-opset17", "gpt2_tiny-opset13"])
def test_onnx_runs_bit_identical_to_the_command_and_close_to_onnxruntime(
    name, cli, tmp_path, cache_dir
):
    d, m = manifest(name)
    feeds = feeds_of(d, m)
    batch, seq = 2, 8
    dims = {"batch": batch, "sequence": seq}
    used = {k: v for k, v in dims.items() if any(k in i["dims"] for i in m["inputs"])}
    model = collage.load(d / m["file"], dims=used)
    assert [(n, s) for n, s, _ in model.inputs] == [(i["name"], tuple(i["shape"])) for i in m["inputs"]]
    session = collage.compile(model, threads=1, cache_dir=cache_dir)
    ours = session.run(feeds)
    flags = [f for k, v in used.items() for f in ("--dim", f"{k}={v}")]
    theirs = cli_run(cli, d / m["file"], feeds, tmp_path, 1, cache_dir, *flags)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    tol = m["tolerance"]
    for a, want in zip(ours, expected_of(d, m)):
        np.testing.assert_allclose(a, want, rtol=tol["rtol"], atol=tol["atol"])


def test_input_shapes_bind_like_dims():
    d, m = manifest("resnet_tiny-opset13")
    by_dim = collage.load(d / m["file"], dims={"batch": 2})
    by_shape = collage.load(d / m["file"], input_shapes={"input": (2, 3, 64, 64)})
    assert by_dim.inputs == by_shape.inputs == [("input", (2, 3, 64, 64), "float32")]
    with pytest.raises(collage.CollageError) as e:
        collage.load(d / m["file"])
    assert e.value.code == "E3020"
    with pytest.raises(collage.CollageError) as e:
        collage.load(d / m["file"], input_shapes={"input": (2, 3, 64)})
    assert e.value.code == "E3019"


def test_bytes_with_external_data_need_their_folder(cache_dir):
    d, m = manifest("external/tiny_mlp")
    data = (d / m["file"]).read_bytes()
    with pytest.raises(collage.CollageError) as e:
        collage.load(data, dims={"batch": 3})
    assert e.value.code == "E3015"
    model = collage.load(data, dims={"batch": 3}, base_dir=d, name="tiny_mlp.onnx")
    from_file = collage.load(d / m["file"], dims={"batch": 3})
    assert model.inputs == from_file.inputs
    feeds = feeds_of(d, m)
    [a] = collage.compile(model, threads=1, cache_dir=cache_dir).run(feeds)
    [b] = collage.compile(from_file, threads=1, cache_dir=cache_dir).run(feeds)
    assert a.tobytes() == b.tobytes()
    tol = m["tolerance"]
    np.testing.assert_allclose(a, expected_of(d, m)[0], rtol=tol["rtol"], atol=tol["atol"])


def test_an_unsupported_onnx_operator_raises_E3022():
    d, m = manifest("resnet_tiny-opset13")
    data = (d / m["file"]).read_bytes()
    # Same length, so the protobuf stays well formed: every Relu becomes an operator no one has.
    assert b"Relu" in data
    broken = data.replace(b"\x22\x04Relu", b"\x22\x04Relx")
    assert broken != data
    with pytest.raises(collage.CollageError) as e:
        collage.load(broken, dims={"batch": 2}, name="broken.onnx")
    assert e.value.code == "E3022" and "Relx" in e.value.rendered


def test_an_onnx_plan_runs_like_the_model(cache_dir):
    d, m = manifest("resnet_tiny-opset13")
    model = collage.load(d / m["file"], dims={"batch": 2})
    plan = collage.partition(model)
    assert plan.total_cost > 0 and plan.partitions
    feeds = feeds_of(d, m)
    [a] = collage.compile(plan, threads=1, cache_dir=cache_dir).run(feeds)
    tol = m["tolerance"]
    np.testing.assert_allclose(a, expected_of(d, m)[0], rtol=tol["rtol"], atol=tol["atol"])
