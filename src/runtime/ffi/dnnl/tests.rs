//! Tests of the oneDNN layer: the hand-written ABI against the installed header, and real
//! primitives against plain loops. The test command (`.ci/run`) installs `libdnnl2` and
//! `libdnnl-dev`; on a machine without them these tests fail with the package's name.

use super::*;

fn dnnl() -> Dnnl {
    Dnnl::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// Every `name value` line `dnnl_abi.c` prints, from the Rust side.
fn rust_abi() -> Vec<(String, i64)> {
    use std::mem::{align_of, size_of};
    let mut v: Vec<(String, i64)> = Vec::new();
    let mut size = |name: &str, s: usize, a: usize| {
        v.push((format!("sizeof_{name}"), s as i64));
        v.push((format!("alignof_{name}"), a as i64));
    };
    size(
        "dnnl_memory_desc_t",
        size_of::<sys::MemoryDesc>(),
        align_of::<sys::MemoryDesc>(),
    );
    for name in ["dnnl_convolution_desc_t", "dnnl_deconvolution_desc_t"] {
        size(
            name,
            size_of::<sys::ConvolutionDesc>(),
            align_of::<sys::ConvolutionDesc>(),
        );
    }
    size(
        "dnnl_inner_product_desc_t",
        size_of::<sys::InnerProductDesc>(),
        align_of::<sys::InnerProductDesc>(),
    );
    size(
        "dnnl_matmul_desc_t",
        size_of::<sys::MatmulDesc>(),
        align_of::<sys::MatmulDesc>(),
    );
    size(
        "dnnl_eltwise_desc_t",
        size_of::<sys::EltwiseDesc>(),
        align_of::<sys::EltwiseDesc>(),
    );
    size(
        "dnnl_layer_normalization_desc_t",
        size_of::<sys::LayerNormalizationDesc>(),
        align_of::<sys::LayerNormalizationDesc>(),
    );
    size(
        "dnnl_batch_normalization_desc_t",
        size_of::<sys::BatchNormalizationDesc>(),
        align_of::<sys::BatchNormalizationDesc>(),
    );
    size(
        "dnnl_softmax_desc_t",
        size_of::<sys::SoftmaxDesc>(),
        align_of::<sys::SoftmaxDesc>(),
    );
    size(
        "dnnl_pooling_desc_t",
        size_of::<sys::PoolingDesc>(),
        align_of::<sys::PoolingDesc>(),
    );
    size(
        "dnnl_binary_desc_t",
        size_of::<sys::BinaryDesc>(),
        align_of::<sys::BinaryDesc>(),
    );
    size(
        "dnnl_exec_arg_t",
        size_of::<sys::ExecArg>(),
        align_of::<sys::ExecArg>(),
    );
    size(
        "dnnl_version_t",
        size_of::<sys::Version>(),
        align_of::<sys::Version>(),
    );
    size(
        "dnnl_dims_t",
        size_of::<sys::Dims>(),
        align_of::<sys::Dims>(),
    );
    v.push((
        "offsetof_dnnl_version_t_hash".into(),
        std::mem::offset_of!(sys::Version, hash) as i64,
    ));
    v.push((
        "offsetof_dnnl_version_t_cpu_runtime".into(),
        std::mem::offset_of!(sys::Version, cpu_runtime) as i64,
    ));
    let values: &[(&str, i64)] = &[
        ("DNNL_MAX_NDIMS", sys::MAX_NDIMS as i64),
        ("DNNL_RUNTIME_DIM_VAL", sys::RUNTIME_DIM_VAL),
        ("dnnl_success", sys::SUCCESS.into()),
        ("dnnl_out_of_memory", sys::OUT_OF_MEMORY.into()),
        ("dnnl_invalid_arguments", sys::INVALID_ARGUMENTS.into()),
        ("dnnl_unimplemented", sys::UNIMPLEMENTED.into()),
        ("dnnl_iterator_ends", sys::ITERATOR_ENDS.into()),
        ("dnnl_runtime_error", sys::RUNTIME_ERROR.into()),
        ("dnnl_not_required", sys::NOT_REQUIRED.into()),
        ("dnnl_data_type_undef", sys::DATA_TYPE_UNDEF.into()),
        ("dnnl_f16", sys::F16.into()),
        ("dnnl_bf16", sys::BF16.into()),
        ("dnnl_f32", sys::F32.into()),
        ("dnnl_s32", sys::S32.into()),
        ("dnnl_s8", sys::S8.into()),
        ("dnnl_u8", sys::U8.into()),
        ("dnnl_format_tag_undef", sys::FORMAT_TAG_UNDEF.into()),
        ("dnnl_format_tag_any", sys::FORMAT_TAG_ANY.into()),
        ("dnnl_a", sys::TAG_A.into()),
        ("dnnl_ab", sys::TAG_AB.into()),
        ("dnnl_abc", sys::TAG_ABC.into()),
        ("dnnl_abcd", sys::TAG_ABCD.into()),
        ("dnnl_abcde", sys::TAG_ABCDE.into()),
        ("dnnl_abcdef", sys::TAG_ABCDEF.into()),
        ("dnnl_ba", sys::TAG_BA.into()),
        ("dnnl_acb", sys::TAG_ACB.into()),
        ("dnnl_abdc", sys::TAG_ABDC.into()),
        ("dnnl_aBcd16b", sys::TAG_A_B16_CD.into()),
        ("dnnl_cpu", sys::ENGINE_CPU.into()),
        (
            "dnnl_stream_default_flags",
            sys::STREAM_DEFAULT_FLAGS.into(),
        ),
        ("dnnl_forward_inference", sys::FORWARD_INFERENCE.into()),
        ("dnnl_convolution_direct", sys::CONVOLUTION_DIRECT.into()),
        (
            "dnnl_convolution_winograd",
            sys::CONVOLUTION_WINOGRAD.into(),
        ),
        (
            "dnnl_deconvolution_direct",
            sys::DECONVOLUTION_DIRECT.into(),
        ),
        ("dnnl_eltwise_relu", sys::ELTWISE_RELU.into()),
        ("dnnl_eltwise_tanh", sys::ELTWISE_TANH.into()),
        ("dnnl_eltwise_logistic", sys::ELTWISE_LOGISTIC.into()),
        ("dnnl_eltwise_clip", sys::ELTWISE_CLIP.into()),
        ("dnnl_eltwise_linear", sys::ELTWISE_LINEAR.into()),
        ("dnnl_eltwise_exp", sys::ELTWISE_EXP.into()),
        ("dnnl_eltwise_sqrt", sys::ELTWISE_SQRT.into()),
        ("dnnl_eltwise_abs", sys::ELTWISE_ABS.into()),
        ("dnnl_eltwise_gelu_tanh", sys::ELTWISE_GELU_TANH.into()),
        ("dnnl_eltwise_gelu_erf", sys::ELTWISE_GELU_ERF.into()),
        ("dnnl_eltwise_swish", sys::ELTWISE_SWISH.into()),
        ("dnnl_eltwise_mish", sys::ELTWISE_MISH.into()),
        ("dnnl_pooling_max", sys::POOLING_MAX.into()),
        (
            "dnnl_pooling_avg_include_padding",
            sys::POOLING_AVG_INCLUDE_PADDING.into(),
        ),
        (
            "dnnl_pooling_avg_exclude_padding",
            sys::POOLING_AVG_EXCLUDE_PADDING.into(),
        ),
        ("dnnl_binary_add", sys::BINARY_ADD.into()),
        ("dnnl_binary_mul", sys::BINARY_MUL.into()),
        ("dnnl_binary_sub", sys::BINARY_SUB.into()),
        ("dnnl_binary_div", sys::BINARY_DIV.into()),
        ("dnnl_binary_max", sys::BINARY_MAX.into()),
        ("dnnl_binary_min", sys::BINARY_MIN.into()),
        ("dnnl_use_global_stats", sys::USE_GLOBAL_STATS.into()),
        ("dnnl_fuse_norm_relu", sys::FUSE_NORM_RELU.into()),
        ("dnnl_use_scale", sys::USE_SCALE.into()),
        ("dnnl_use_shift", sys::USE_SHIFT.into()),
        (
            "dnnl_scratchpad_mode_library",
            sys::SCRATCHPAD_MODE_LIBRARY.into(),
        ),
        (
            "dnnl_scratchpad_mode_user",
            sys::SCRATCHPAD_MODE_USER.into(),
        ),
        ("dnnl_query_impl_info_str", sys::QUERY_IMPL_INFO_STR.into()),
        ("dnnl_query_src_md", sys::QUERY_SRC_MD.into()),
        ("dnnl_query_weights_md", sys::QUERY_WEIGHTS_MD.into()),
        ("dnnl_query_dst_md", sys::QUERY_DST_MD.into()),
        ("dnnl_query_workspace_md", sys::QUERY_WORKSPACE_MD.into()),
        ("dnnl_query_scratchpad_md", sys::QUERY_SCRATCHPAD_MD.into()),
        ("DNNL_ARG_SRC", sys::ARG_SRC.into()),
        ("DNNL_ARG_SRC_1", sys::ARG_SRC_1.into()),
        ("DNNL_ARG_DST", sys::ARG_DST.into()),
        ("DNNL_ARG_WEIGHTS", sys::ARG_WEIGHTS.into()),
        ("DNNL_ARG_BIAS", sys::ARG_BIAS.into()),
        ("DNNL_ARG_MEAN", sys::ARG_MEAN.into()),
        ("DNNL_ARG_VARIANCE", sys::ARG_VARIANCE.into()),
        ("DNNL_ARG_SCALE", sys::ARG_SCALE.into()),
        ("DNNL_ARG_SHIFT", sys::ARG_SHIFT.into()),
        ("DNNL_ARG_WORKSPACE", sys::ARG_WORKSPACE.into()),
        ("DNNL_ARG_SCRATCHPAD", sys::ARG_SCRATCHPAD.into()),
        ("DNNL_ARG_FROM", sys::ARG_FROM.into()),
        ("DNNL_ARG_TO", sys::ARG_TO.into()),
        (
            "DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE",
            sys::ARG_ATTR_MULTIPLE_POST_OP_BASE.into(),
        ),
        (
            "DNNL_ARG_ATTR_MULTIPLE_POST_OP(0)",
            sys::arg_post_op(0).into(),
        ),
        (
            "DNNL_ARG_ATTR_MULTIPLE_POST_OP(1)",
            sys::arg_post_op(1).into(),
        ),
        ("DNNL_RUNTIME_SEQ", sys::RUNTIME_SEQ.into()),
        ("DNNL_RUNTIME_OMP", sys::RUNTIME_OMP.into()),
        ("DNNL_RUNTIME_TBB", sys::RUNTIME_TBB.into()),
        ("DNNL_RUNTIME_THREADPOOL", sys::RUNTIME_THREADPOOL.into()),
    ];
    v.extend(values.iter().map(|&(n, x)| (n.to_string(), x)));
    v
}

#[test]
fn abi_matches_the_installed_header() {
    let header = std::path::Path::new("/usr/include/oneapi/dnnl/dnnl.h");
    assert!(
        header.exists(),
        "{} is missing: install the Debian package `libdnnl-dev` (.ci/run installs it); \
         this test compares the hand-written declarations with it",
        header.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("dnnl_abi");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime/ffi/dnnl_abi.c");
    let cc = std::process::Command::new("cc")
        .arg("-std=c11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("the system C compiler `cc` runs");
    assert!(
        cc.status.success(),
        "compiling {}: {}",
        src.display(),
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let c: Vec<(String, i64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect();
    let rust = rust_abi();
    let names = |v: &[(String, i64)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&c),
        names(&rust),
        "dnnl_abi.c and the Rust list differ"
    );
    let wrong: Vec<String> = c
        .iter()
        .zip(&rust)
        .filter(|(a, b)| a.1 != b.1)
        .map(|(a, b)| format!("{}: header {}, Rust {}", a.0, a.1, b.1))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn version_is_2x_on_openmp() {
    let d = dnnl();
    let v = d.version();
    assert_eq!(v.major, 2, "{v}");
    assert_eq!(v.cpu_runtime, "OpenMP", "{v}");
    assert!(d.path().is_absolute());
    let a = availability();
    assert!(a.available, "{a:?}");
    assert!(a.version.unwrap().starts_with("2."));
}

#[test]
fn missing_library_names_the_package() {
    let err = Dnnl::load_file("/nonexistent/libdnnl.so.2").err().unwrap();
    let text = err.to_string();
    assert!(text.contains("oneDNN is not available"), "{text}");
    assert!(text.contains("apt-get install libdnnl2"), "{text}");
    assert!(text.contains("COLLAGE_DNNL_LIBRARY"), "{text}");
}

/// Deterministic small values (exact enough that sums compare within 1e-4).
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + seed * 101) % 23) as f32 - 11.0) / 8.0)
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// A memory in layout `want` holding `data` (given in the dense layout of `plain`), through a
/// reorder when the layouts differ.
fn load(
    engine: &Engine,
    stream: &Stream,
    data: &[f32],
    plain: &MemoryDesc,
    want: &MemoryDesc,
) -> Memory {
    let d = engine.dnnl();
    let mut user = Memory::allocate(engine, plain).unwrap();
    user.write_f32(data).unwrap();
    if d.md_equal(plain, want) {
        return user;
    }
    let out = Memory::allocate(engine, want).unwrap();
    let r = PrimitiveDesc::reorder(engine, plain, want)
        .unwrap()
        .primitive()
        .unwrap();
    r.run(stream, &[(sys::ARG_FROM, &user), (sys::ARG_TO, &out)])
        .unwrap();
    out
}

/// The contents of `m` in the dense layout `plain`.
fn unload(engine: &Engine, stream: &Stream, m: &Memory, plain: &MemoryDesc) -> Vec<f32> {
    let d = engine.dnnl();
    let n = d.md_size(plain) / 4;
    if d.md_equal(m.desc(), plain) {
        return m.read_f32().unwrap()[..n].to_vec();
    }
    let user = Memory::allocate(engine, plain).unwrap();
    let r = PrimitiveDesc::reorder(engine, m.desc(), plain)
        .unwrap()
        .primitive()
        .unwrap();
    r.run(stream, &[(sys::ARG_FROM, m), (sys::ARG_TO, &user)])
        .unwrap();
    user.read_f32().unwrap()[..n].to_vec()
}

/// A 3x3 convolution, stride 1, padding 1, with a bias and a relu post-op, every layout `any`,
/// against a direct loop; by the direct algorithm, then by Winograd's, which oneDNN 2.x has
/// for f32 on AVX-512 only (elsewhere it must refuse it, not compute something else).
#[test]
fn convolution_with_bias_and_relu_post_op() {
    convolution_3x3_bias_relu(false);
    convolution_3x3_bias_relu(true);
}

fn convolution_3x3_bias_relu(winograd: bool) {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (n, ic, oc, h, w) = (1i64, 16i64, 16i64, 6i64, 5i64);
    let x = values((n * ic * h * w) as usize, 1);
    let wt = values((oc * ic * 9) as usize, 2);
    let b = values(oc as usize, 3);
    let f32 = DataType::F32;
    let any = |s: &[i64]| d.md(s, f32, Tag::ANY).unwrap();
    let (src_any, wei_any, dst_any) = (
        any(&[n, ic, h, w]),
        any(&[oc, ic, 3, 3]),
        any(&[n, oc, h, w]),
    );
    let bias_md = d.md(&[oc], f32, Tag::A).unwrap();
    let op = d
        .convolution(&Convolution {
            src: &src_any,
            weights: &wei_any,
            bias: Some(&bias_md),
            dst: &dst_any,
            strides: &[1, 1],
            dilates: &[0, 0],
            pad_l: &[1, 1],
            pad_r: &[1, 1],
            transposed: false,
            winograd,
        })
        .unwrap();
    let mut po = d.post_ops().unwrap();
    po.eltwise(Alg::RELU, 0.0, 0.0).unwrap();
    let mut attr = d.attr().unwrap();
    attr.set_post_ops(&po).unwrap();
    attr.set_user_scratchpad().unwrap();
    let pd = match PrimitiveDesc::new(&engine, &op, Some(&attr)) {
        Ok(pd) => pd,
        Err(e) if winograd && !std::arch::is_x86_feature_detected!("avx512f") => {
            eprintln!("Winograd refused without AVX-512, as expected: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(!pd.impl_info().is_empty());
    assert_eq!(
        pd.impl_info().contains("wino"),
        winograd,
        "{}",
        pd.impl_info()
    );
    let plain = |s: &[i64]| d.md(s, f32, Tag::plain(s.len()).unwrap()).unwrap();
    let src = load(
        &engine,
        &stream,
        &x,
        &plain(&[n, ic, h, w]),
        &pd.src_md().unwrap(),
    );
    let wei = load(
        &engine,
        &stream,
        &wt,
        &plain(&[oc, ic, 3, 3]),
        &pd.weights_md(0).unwrap(),
    );
    let bias = load(&engine, &stream, &b, &bias_md, &pd.weights_md(1).unwrap());
    let dst = Memory::allocate(&engine, &pd.dst_md().unwrap()).unwrap();
    let mut args = vec![
        (sys::ARG_SRC, &src),
        (sys::ARG_WEIGHTS, &wei),
        (sys::ARG_BIAS, &bias),
        (sys::ARG_DST, &dst),
    ];
    let scratch = pd
        .scratchpad_md()
        .map(|md| Memory::allocate(&engine, &md).unwrap());
    if let Some(s) = &scratch {
        args.push((sys::ARG_SCRATCHPAD, s));
    }
    pd.primitive().unwrap().run(&stream, &args).unwrap();
    let got = unload(&engine, &stream, &dst, &plain(&[n, oc, h, w]));
    let (ic, oc, h, w) = (ic as usize, oc as usize, h as usize, w as usize);
    let mut want = vec![0.0f32; oc * h * w];
    for o in 0..oc {
        for y in 0..h {
            for xx in 0..w {
                let mut s = b[o];
                for c in 0..ic {
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (y as i64 + ky as i64 - 1, xx as i64 + kx as i64 - 1);
                            if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                s += x[(c * h + iy as usize) * w + ix as usize]
                                    * wt[((o * ic + c) * 3 + ky) * 3 + kx];
                            }
                        }
                    }
                }
                want[(o * h + y) * w + xx] = s.max(0.0);
            }
        }
    }
    // Winograd's transforms round differently from the direct sums.
    let tol = if winograd { 1e-3 } else { 1e-4 };
    assert_close(&got, &want, tol, "conv");
}

/// A grouped (depthwise) convolution through 5-D weights {G, O/G, I/G, KH, KW}, stride 2,
/// asymmetric padding, plain layouts.
#[test]
fn depthwise_convolution_with_groups() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (c, h, w) = (4usize, 5usize, 5usize);
    let (oh, ow) = (3usize, 2usize);
    let x = values(c * h * w, 4);
    let wt = values(c * 9, 5);
    let f32 = DataType::F32;
    // padding: top 1, bottom 1, left 0, right 0 -> out h = (5 + 2 - 3) / 2 + 1 = 3,
    // out w = (5 - 3) / 2 + 1 = 2.
    let src_md = d
        .md(&[1, c as i64, h as i64, w as i64], f32, Tag::ABCD)
        .unwrap();
    let wei_md = d.md(&[c as i64, 1, 1, 3, 3], f32, Tag::ABCDE).unwrap();
    let dst_md = d
        .md(&[1, c as i64, oh as i64, ow as i64], f32, Tag::ABCD)
        .unwrap();
    let op = d
        .convolution(&Convolution {
            src: &src_md,
            weights: &wei_md,
            bias: None,
            dst: &dst_md,
            strides: &[2, 2],
            dilates: &[0, 0],
            pad_l: &[1, 0],
            pad_r: &[1, 0],
            transposed: false,
            winograd: false,
        })
        .unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let src = load(&engine, &stream, &x, &src_md, &src_md);
    let wei = load(&engine, &stream, &wt, &wei_md, &wei_md);
    let dst = Memory::allocate(&engine, &dst_md).unwrap();
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &src),
                (sys::ARG_WEIGHTS, &wei),
                (sys::ARG_DST, &dst),
            ],
        )
        .unwrap();
    let got = dst.read_f32().unwrap();
    let mut want = vec![0.0f32; c * oh * ow];
    for ch in 0..c {
        for y in 0..oh {
            for xx in 0..ow {
                let mut s = 0.0;
                for ky in 0..3 {
                    for kx in 0..3 {
                        let iy = (y * 2 + ky) as i64 - 1;
                        let ix = (xx * 2 + kx) as i64;
                        if iy >= 0 && (iy as usize) < h && (ix as usize) < w {
                            s += x[(ch * h + iy as usize) * w + ix as usize]
                                * wt[ch * 9 + ky * 3 + kx];
                        }
                    }
                }
                want[(ch * oh + y) * ow + xx] = s;
            }
        }
    }
    assert_close(&got, &want, 1e-4, "depthwise");
}

/// `nn.dense` as an inner product with a bias: dst{N, O} = src{N, K} · W{O, K}ᵀ + b.
#[test]
fn inner_product_with_bias() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (n, k, o) = (3usize, 5usize, 4usize);
    let x = values(n * k, 6);
    let wt = values(o * k, 7);
    let b = values(o, 8);
    let f32 = DataType::F32;
    let src_md = d.md(&[n as i64, k as i64], f32, Tag::AB).unwrap();
    let wei_md = d.md(&[o as i64, k as i64], f32, Tag::AB).unwrap();
    let bias_md = d.md(&[o as i64], f32, Tag::A).unwrap();
    let dst_md = d.md(&[n as i64, o as i64], f32, Tag::AB).unwrap();
    let wei_any = d.md(&[o as i64, k as i64], f32, Tag::ANY).unwrap();
    let op = d
        .inner_product(&src_md, &wei_any, Some(&bias_md), &dst_md)
        .unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let src = load(&engine, &stream, &x, &src_md, &pd.src_md().unwrap());
    // The weights go to the layout the primitive chose, once, as a backend prepares them.
    let wei = load(&engine, &stream, &wt, &wei_md, &pd.weights_md(0).unwrap());
    let bias = load(&engine, &stream, &b, &bias_md, &bias_md);
    let dst = Memory::allocate(&engine, &pd.dst_md().unwrap()).unwrap();
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &src),
                (sys::ARG_WEIGHTS, &wei),
                (sys::ARG_BIAS, &bias),
                (sys::ARG_DST, &dst),
            ],
        )
        .unwrap();
    let got = unload(&engine, &stream, &dst, &dst_md);
    let want: Vec<f32> = (0..n * o)
        .map(|i| {
            let (r, c) = (i / o, i % o);
            b[c] + (0..k).map(|p| x[r * k + p] * wt[c * k + p]).sum::<f32>()
        })
        .collect();
    assert_close(&got, &want, 1e-4, "inner product");
}

/// `nn.batch_matmul(A, B, transpose_b=True)` as a 3-D matmul whose weights descriptor sees the
/// stored B{batch, N, K} as {batch, K, N} through its strides (no copy).
#[test]
fn batched_matmul_with_transposed_b() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (bt, m, k, n) = (2usize, 3usize, 4usize, 5usize);
    let a = values(bt * m * k, 9);
    let bm = values(bt * n * k, 10);
    let f32 = DataType::F32;
    let a_md = d
        .md(&[bt as i64, m as i64, k as i64], f32, Tag::ABC)
        .unwrap();
    let b_stored = d
        .md(&[bt as i64, n as i64, k as i64], f32, Tag::ABC)
        .unwrap();
    let b_md = d
        .md_strides(
            &[bt as i64, k as i64, n as i64],
            f32,
            &[(n * k) as i64, 1, k as i64],
        )
        .unwrap();
    // The same view through the `acb` tag, and through a permutation of the stored layout.
    let b_tag = d
        .md(&[bt as i64, k as i64, n as i64], f32, Tag::ACB)
        .unwrap();
    assert!(d.md_equal(&b_md, &b_tag));
    assert!(d.md_equal(&d.md_permute(&b_stored, &[0, 2, 1]).unwrap(), &b_md));
    let c_md = d
        .md(&[bt as i64, m as i64, n as i64], f32, Tag::ABC)
        .unwrap();
    let op = d.matmul(&a_md, &b_md, None, &c_md).unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let am = load(&engine, &stream, &a, &a_md, &a_md);
    let mut bmem = Memory::allocate(&engine, &b_md).unwrap();
    bmem.write_f32(&bm).unwrap();
    let cm = Memory::allocate(&engine, &c_md).unwrap();
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &am),
                (sys::ARG_WEIGHTS, &bmem),
                (sys::ARG_DST, &cm),
            ],
        )
        .unwrap();
    let got = cm.read_f32().unwrap();
    let mut want = vec![0.0f32; bt * m * n];
    for b in 0..bt {
        for i in 0..m {
            for j in 0..n {
                want[(b * m + i) * n + j] = (0..k)
                    .map(|p| a[(b * m + i) * k + p] * bm[(b * n + j) * k + p])
                    .sum();
            }
        }
    }
    assert_close(&got, &want, 1e-4, "batch matmul");
}

/// Layer normalization over the last axis with scale and shift.
#[test]
fn layer_norm_with_scale_and_shift() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (rows, cols) = (4usize, 8usize);
    let x = values(rows * cols, 11);
    let gamma = values(cols, 12);
    let beta = values(cols, 13);
    let eps = 1e-5f32;
    let f32 = DataType::F32;
    let md = d.md(&[rows as i64, cols as i64], f32, Tag::AB).unwrap();
    let vec_md = d.md(&[cols as i64], f32, Tag::A).unwrap();
    let op = d
        .layer_norm(&md, eps, sys::USE_SCALE | sys::USE_SHIFT)
        .unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let src = load(&engine, &stream, &x, &md, &md);
    let scale = load(&engine, &stream, &gamma, &vec_md, &vec_md);
    let shift = load(&engine, &stream, &beta, &vec_md, &vec_md);
    let dst = Memory::allocate(&engine, &md).unwrap();
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &src),
                (sys::ARG_SCALE, &scale),
                (sys::ARG_SHIFT, &shift),
                (sys::ARG_DST, &dst),
            ],
        )
        .unwrap();
    let got = dst.read_f32().unwrap();
    let mut want = vec![0.0f32; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let mean = row.iter().sum::<f32>() / cols as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
        for c in 0..cols {
            want[r * cols + c] = (row[c] - mean) / (var + eps).sqrt() * gamma[c] + beta[c];
        }
    }
    assert_close(&got, &want, 1e-4, "layer norm");
}

/// GPT-2's GELU, tanh form, as one eltwise primitive.
#[test]
fn gelu_tanh_eltwise() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let x: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
    let md = d.md(&[8, 8], DataType::F32, Tag::AB).unwrap();
    let op = d.eltwise(Alg::GELU_TANH, &md, 0.0, 0.0).unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let src = load(&engine, &stream, &x, &md, &md);
    let dst = Memory::allocate(&engine, &md).unwrap();
    pd.primitive()
        .unwrap()
        .run(&stream, &[(sys::ARG_SRC, &src), (sys::ARG_DST, &dst)])
        .unwrap();
    let want: Vec<f32> = x
        .iter()
        .map(|&v| {
            let (v, c) = (v as f64, (2.0 / std::f64::consts::PI).sqrt());
            (0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())) as f32
        })
        .collect();
    assert_close(&dst.read_f32().unwrap(), &want, 1e-5, "gelu_tanh");
}

/// Plain NCHW into the blocked layout a convolution prefers, and back, bit for bit; and into
/// a channels-last view given by strides.
#[test]
fn reorder_round_trip() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let shape = [2i64, 16, 3, 5];
    let n: usize = shape.iter().product::<i64>() as usize;
    let x = values(n, 14);
    let f32 = DataType::F32;
    let plain = d.md(&shape, f32, Tag::ABCD).unwrap();
    let any = d.md(&shape, f32, Tag::ANY).unwrap();
    let wei = d.md(&[16, 16, 3, 3], f32, Tag::ANY).unwrap();
    let op = d
        .convolution(&Convolution {
            src: &any,
            weights: &wei,
            bias: None,
            dst: &any,
            strides: &[1, 1],
            dilates: &[0, 0],
            pad_l: &[1, 1],
            pad_r: &[1, 1],
            transposed: false,
            winograd: false,
        })
        .unwrap();
    let chosen = PrimitiveDesc::new(&engine, &op, None)
        .unwrap()
        .src_md()
        .unwrap();
    let nhwc = d
        .md_strides(&shape, f32, &[16 * 3 * 5, 1, 5 * 16, 16])
        .unwrap();
    for layout in [chosen, nhwc] {
        let m = load(&engine, &stream, &x, &plain, &layout);
        assert!(d.md_size(&layout) >= n * 4);
        assert_eq!(unload(&engine, &stream, &m, &plain), x);
    }
    // Reshape keeps the bytes.
    let flat = d.md_reshape(&plain, &[2, 16 * 15]).unwrap();
    assert_eq!(d.md_size(&flat), d.md_size(&plain));
}

/// What oneDNN rejects is an error carrying the call and its status, never a crash.
#[test]
fn rejected_descriptors_are_errors() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let f32 = DataType::F32;
    // A convolution whose output shape does not follow from its input.
    let src = d.md(&[1, 3, 8, 8], f32, Tag::ABCD).unwrap();
    let wei = d.md(&[4, 3, 3, 3], f32, Tag::ABCD).unwrap();
    let bad_dst = d.md(&[1, 4, 5, 5], f32, Tag::ABCD).unwrap();
    let e = d
        .convolution(&Convolution {
            src: &src,
            weights: &wei,
            bias: None,
            dst: &bad_dst,
            strides: &[1, 1],
            dilates: &[0, 0],
            pad_l: &[0, 0],
            pad_r: &[0, 0],
            transposed: false,
            winograd: false,
        })
        .err()
        .expect("rejected");
    assert!(e.is_unsupported(), "{e}");
    assert!(
        e.to_string().contains("convolution_forward_desc_init"),
        "{e}"
    );
    // Too many dimensions for dnnl_dims_t.
    let e = d.md(&[1; 13], f32, Tag::ANY).err().unwrap();
    assert_eq!(e.status, sys::INVALID_ARGUMENTS);
    // A softmax over an axis the tensor does not have: rejected when the primitive descriptor
    // is created, if not before.
    let md = d.md(&[2, 3], f32, Tag::AB).unwrap();
    let rejected = match d.softmax(&md, 5) {
        Err(e) => e,
        Ok(op) => PrimitiveDesc::new(&engine, &op, None)
            .err()
            .expect("rejected"),
    };
    assert!(rejected.is_unsupported(), "{rejected}");
}

/// The post-ops a residual uses: `sum` accumulates into the prefilled destination, `binary_add`
/// adds a broadcast tensor given as a post-op argument.
#[test]
fn sum_and_binary_post_ops() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let (m, k, n) = (2usize, 3usize, 4usize);
    let x = values(m * k, 15);
    let wt = values(n * k, 16);
    let s = values(m * n, 17);
    let row = values(n, 18);
    let f32 = DataType::F32;
    let src_md = d.md(&[m as i64, k as i64], f32, Tag::AB).unwrap();
    let wei_md = d.md(&[n as i64, k as i64], f32, Tag::AB).unwrap();
    let dst_md = d.md(&[m as i64, n as i64], f32, Tag::AB).unwrap();
    let row_md = d.md(&[1, n as i64], f32, Tag::AB).unwrap();
    let op = d.inner_product(&src_md, &wei_md, None, &dst_md).unwrap();
    let mut po = d.post_ops().unwrap();
    po.sum(1.0)
        .unwrap()
        .binary(Alg::BINARY_ADD, &row_md)
        .unwrap();
    let mut attr = d.attr().unwrap();
    attr.set_post_ops(&po).unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, Some(&attr)).unwrap();
    let src = load(&engine, &stream, &x, &src_md, &src_md);
    let wei = load(&engine, &stream, &wt, &wei_md, &wei_md);
    let rowm = load(&engine, &stream, &row, &row_md, &row_md);
    let dst = load(&engine, &stream, &s, &dst_md, &dst_md);
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &src),
                (sys::ARG_WEIGHTS, &wei),
                (sys::ARG_DST, &dst),
                (sys::arg_post_op(1) | sys::ARG_SRC_1, &rowm),
            ],
        )
        .unwrap();
    let want: Vec<f32> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k).map(|p| x[r * k + p] * wt[c * k + p]).sum::<f32>() + s[i] + row[c]
        })
        .collect();
    assert_close(&dst.read_f32().unwrap(), &want, 1e-4, "sum + binary");
}

/// Max pooling 2x2/2, softmax over the last axis, and batch norm with global statistics and a
/// fused relu, each against a loop.
#[test]
fn pooling_softmax_and_batch_norm() {
    let d = dnnl();
    let engine = d.engine().unwrap();
    let stream = engine.stream().unwrap();
    let f32 = DataType::F32;
    // Pooling: [1, 2, 4, 4] -> [1, 2, 2, 2].
    let x = values(32, 19);
    let src_md = d.md(&[1, 2, 4, 4], f32, Tag::ABCD).unwrap();
    let dst_md = d.md(&[1, 2, 2, 2], f32, Tag::ABCD).unwrap();
    let op = d
        .pooling(
            Alg::POOLING_MAX,
            &src_md,
            &dst_md,
            &[2, 2],
            &[2, 2],
            &[0, 0],
            &[0, 0],
        )
        .unwrap();
    let pd = PrimitiveDesc::new(&engine, &op, None).unwrap();
    let src = load(&engine, &stream, &x, &src_md, &src_md);
    let dst = Memory::allocate(&engine, &dst_md).unwrap();
    pd.primitive()
        .unwrap()
        .run(&stream, &[(sys::ARG_SRC, &src), (sys::ARG_DST, &dst)])
        .unwrap();
    let mut want = Vec::new();
    for c in 0..2 {
        for y in 0..2 {
            for xx in 0..2 {
                let at = |dy: usize, dx: usize| x[(c * 4 + y * 2 + dy) * 4 + xx * 2 + dx];
                want.push(at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1)));
            }
        }
    }
    assert_eq!(dst.read_f32().unwrap(), want);
    // Softmax over axis 1 of [3, 5].
    let x = values(15, 20);
    let md = d.md(&[3, 5], f32, Tag::AB).unwrap();
    let pd = PrimitiveDesc::new(&engine, &d.softmax(&md, 1).unwrap(), None).unwrap();
    let src = load(&engine, &stream, &x, &md, &md);
    let dst = Memory::allocate(&engine, &md).unwrap();
    pd.primitive()
        .unwrap()
        .run(&stream, &[(sys::ARG_SRC, &src), (sys::ARG_DST, &dst)])
        .unwrap();
    let mut want = Vec::new();
    for r in 0..3 {
        let row = &x[r * 5..r * 5 + 5];
        let max = row.iter().cloned().fold(f32::MIN, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        want.extend(row.iter().map(|v| (v - max).exp() / sum));
    }
    assert_close(&dst.read_f32().unwrap(), &want, 1e-5, "softmax");
    // Batch norm over the channels of [2, 3, 2, 2], global statistics, scale, shift, relu.
    let x = values(24, 21);
    let (gamma, beta, mean) = (values(3, 22), values(3, 23), values(3, 24));
    let var: Vec<f32> = values(3, 25).iter().map(|v| v.abs() + 0.5).collect();
    let eps = 1e-5f32;
    let md = d.md(&[2, 3, 2, 2], f32, Tag::ABCD).unwrap();
    let c_md = d.md(&[3], f32, Tag::A).unwrap();
    let flags = sys::USE_GLOBAL_STATS | sys::USE_SCALE | sys::USE_SHIFT | sys::FUSE_NORM_RELU;
    let pd = PrimitiveDesc::new(&engine, &d.batch_norm(&md, eps, flags).unwrap(), None).unwrap();
    let one = |v: &[f32]| load(&engine, &stream, v, &c_md, &c_md);
    let (src, g, b, mu, s2) = (
        load(&engine, &stream, &x, &md, &md),
        one(&gamma),
        one(&beta),
        one(&mean),
        one(&var),
    );
    let dst = Memory::allocate(&engine, &md).unwrap();
    pd.primitive()
        .unwrap()
        .run(
            &stream,
            &[
                (sys::ARG_SRC, &src),
                (sys::ARG_MEAN, &mu),
                (sys::ARG_VARIANCE, &s2),
                (sys::ARG_SCALE, &g),
                (sys::ARG_SHIFT, &b),
                (sys::ARG_DST, &dst),
            ],
        )
        .unwrap();
    let want: Vec<f32> = (0..24)
        .map(|i| {
            let c = (i / 4) % 3;
            ((x[i] - mean[c]) / (var[c] + eps).sqrt() * gamma[c] + beta[c]).max(0.0)
        })
        .collect();
    assert_close(&dst.read_f32().unwrap(), &want, 1e-4, "batch norm");
}
