//! MobileNetV2's depthwise and pointwise convolutions (torchvision's shapes, batch 1, `NCHW`,
//! each with the epilogue the model gives it after batch norm is folded: bias and `clip(0, 6)`,
//! or bias alone on the projections) as generated code (`src/runtime/backend/native/emit/`:
//! the phase-plane depthwise kernel, the implicit GEMM of the pointwise ones) beside oneDNN's
//! for the same shapes (`dnnl.conv2d_bias_clip` / `dnnl.conv2d_bias` partitions).
//!
//! As in `benches/libs.rs`: each partition is compiled and prepared once with its weights and
//! bias as constants of the call site; for oneDNN, `kernel` is the primitive alone in the
//! layouts it chose and `boundary` the reorders between those and the plain `NCHW` tensors at
//! the partition's boundary (a partition inside a model pays both); generated code works on
//! the plain tensors, so its figure (`call`) is the whole call. oneDNN is optional: without
//! `libdnnl.so.2` its half is skipped with a note.
//!
//! Run with `cargo bench --bench mobilenet` (`-- dw/` the depthwise ones, `-- pw/` the pointwise
//! ones, `-- /2T/` one thread count, `-- /native/` one backend).

use collage::runtime::backend::dnnl::{DnnlBackend, Part};
use collage::runtime::backend::native::{Config as NativeConfig, Native};
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::kernel::{Backend, MemCounter, Prepared, RunCx, Unit};
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "common/kernels.rs"]
mod kernels;
use kernels::{dnnl_setup, lazy_bench, load, tensors};
use std::time::Duration;

/// One convolution: input channels, output channels, input height = width, window, stride,
/// and whether `clip(0, 6)` follows the bias.
struct Conv {
    c: usize,
    o: usize,
    hw: usize,
    k: usize,
    stride: usize,
    clip: bool,
}

impl Conv {
    fn depthwise(&self) -> bool {
        self.k > 1
    }

    fn name(&self) -> String {
        if self.depthwise() {
            format!("dw/{}x{}x{} s{}", self.c, self.hw, self.hw, self.stride)
        } else {
            format!("pw/{}-{} {}x{}", self.c, self.o, self.hw, self.hw)
        }
    }

    /// The weight's and bias's shapes.
    fn params(&self) -> Vec<(&'static str, Vec<usize>, bool)> {
        let cg = if self.depthwise() { 1 } else { self.c };
        vec![
            ("x", vec![1, self.c, self.hw, self.hw], false),
            ("w", vec![self.o, cg, self.k, self.k], true),
            ("bias", vec![self.o, 1, 1], true),
        ]
    }

    fn body(&self) -> String {
        let pad = self.k / 2;
        let groups = if self.depthwise() { self.c } else { 1 };
        let conv = format!(
            "add(nn.conv2d(%x, %w, strides=[{s}, {s}], padding=[{pad}, {pad}, {pad}, {pad}], \
             groups={groups}, channels={o}, kernel_size=[{k}, {k}]), %bias)",
            s = self.stride,
            o = self.o,
            k = self.k
        );
        if self.clip {
            format!("clip({conv}, a_min=0f, a_max=6f)")
        } else {
            conv
        }
    }

    fn composite(&self) -> &'static str {
        if self.clip {
            "dnnl.conv2d_bias_clip"
        } else {
            "dnnl.conv2d_bias"
        }
    }

    /// The partition: `Compiler="dnnl"` with one composite, or a `Primitive=1` function.
    fn text(&self, dnnl: bool) -> String {
        let decl: Vec<String> = self
            .params()
            .iter()
            .map(|(n, d, _)| {
                let d: Vec<String> = d.iter().map(|x| x.to_string()).collect();
                format!("%{n}: Tensor[({}), float32]", d.join(", "))
            })
            .collect();
        let decl = decl.join(", ");
        if !dnnl {
            return format!(
                "#[version = \"0.0.5\"]\ndef @part({decl}, Primitive=1) {{\n    {}\n}}\n",
                self.body()
            );
        }
        format!(
            "#[version = \"0.0.5\"]\n\
             def @part({decl}, Primitive=1, Compiler=\"dnnl\", global_symbol=\"part\") {{\n  \
             %100 = fn ({decl}, Composite=\"{}\") {{\n    {}\n  }};\n  \
             %100(%x, %w, %bias)\n}}\n",
            self.composite(),
            self.body()
        )
    }
}

fn dw(c: usize, hw: usize, stride: usize) -> Conv {
    Conv {
        c,
        o: c,
        hw,
        k: 3,
        stride,
        clip: true,
    }
}

fn pw(c: usize, o: usize, hw: usize, clip: bool) -> Conv {
    Conv {
        c,
        o,
        hw,
        k: 1,
        stride: 1,
        clip,
    }
}

/// Every depthwise shape of MobileNetV2 and a pointwise expansion (clip) and projection (bias
/// alone) per resolution.
fn convs() -> Vec<Conv> {
    vec![
        dw(32, 112, 1),
        dw(96, 112, 2),
        dw(144, 56, 1),
        dw(144, 56, 2),
        dw(192, 28, 1),
        dw(192, 28, 2),
        dw(384, 14, 1),
        dw(576, 14, 1),
        dw(576, 14, 2),
        dw(960, 7, 1),
        pw(32, 16, 112, false),
        pw(16, 96, 112, true),
        pw(24, 144, 56, true),
        pw(144, 24, 56, false),
        pw(32, 192, 28, true),
        pw(192, 32, 28, false),
        pw(64, 384, 14, true),
        pw(384, 64, 14, false),
        pw(576, 96, 14, false),
        pw(160, 960, 7, true),
        pw(960, 160, 7, false),
        pw(320, 1280, 7, true),
    ]
}

fn bench_convs(c: &mut Criterion) {
    let omp = collage::runtime::ffi::omp::Omp::shared().unwrap_or_else(|e| panic!("{e}"));
    let cache = tempfile::tempdir().expect("a temporary kernel cache");
    let mem = MemCounter::new(0);
    let dnnl_ok = match DnnlBackend::new(1) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("note: oneDNN is not available ({e}); only generated code is measured");
            false
        }
    };
    for conv in convs() {
        for threads in [1usize, 2] {
            let tag = format!("{threads}T");
            if dnnl_ok {
                for (what, part) in [("kernel", Part::Compute), ("boundary", Part::Boundary)] {
                    lazy_bench(
                        c,
                        &format!("{}/dnnl/{tag}/{what}", conv.name()),
                        || dnnl_setup(&conv.text(true), &conv.name(), conv.params(), threads),
                        |(prepared, inputs, outputs)| {
                            prepared.run_part(inputs, outputs, part).expect("runs")
                        },
                    );
                }
            }
            lazy_bench(
                c,
                &format!("{}/native/{tag}/call", conv.name()),
                || {
                    let b = Native::new(NativeConfig {
                        threads,
                        cache_dir: Some(cache.path().to_path_buf()),
                        ..NativeConfig::default()
                    });
                    let m = load(&conv.text(false));
                    let weights = Weights::new(0);
                    let mw = weights.for_module(&m);
                    let unit = Unit::Function {
                        module: &m,
                        func: m.def("part").expect("@part"),
                    };
                    let kernel = b
                        .compile(&unit, &mw)
                        .unwrap_or_else(|u| panic!("{}: {}", conv.name(), u.message));
                    let (consts, inputs, outputs) = tensors(&m, conv.params());
                    let prepared: Box<dyn Prepared> = kernel.prepare(&consts).expect("prepares");
                    (prepared, inputs, outputs)
                },
                |(prepared, inputs, outputs)| {
                    omp.set_num_threads(threads);
                    prepared
                        .run(
                            inputs,
                            outputs,
                            &RunCx {
                                mem: &mem,
                                buffers: None,
                            },
                        )
                        .expect("runs")
                },
            );
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_convs
}
criterion_main!(benches);
