//! MobileNetV2's depthwise and pointwise convolutions and ResNet-50's pointwise and stride-1
//! 3 × 3 ones
//! (torchvision's shapes, batch 1, `NCHW`, each with the epilogue the model gives it after
//! batch norm is folded: bias and `clip(0, 6)`, or bias alone on MobileNetV2's projections;
//! bias and `relu`, or bias, the block's input added back and `relu` on ResNet-50's) as
//! generated code (`src/runtime/backend/native/emit/`: the phase-plane depthwise kernel, the
//! pointwise kernel, the implicit GEMM on 7 × 7 planes) beside oneDNN's for the same shapes
//! (`dnnl.conv2d_bias_clip`, `dnnl.conv2d_bias`, `dnnl.conv2d_bias_relu`,
//! `dnnl.conv2d_bias_sum_relu` partitions).
//!
//! As in `benches/libs.rs`: each partition is compiled and prepared once with its weights and
//! bias as constants of the call site; for oneDNN, `kernel` is the primitive alone in the
//! layouts it chose and `boundary` the reorders between those and the plain `NCHW` tensors at
//! the partition's boundary (a partition inside a model pays both); generated code works on
//! the plain tensors, so its figure (`call`) is the whole call. oneDNN is optional: without
//! `libdnnl.so.2` its half is skipped with a note.
//!
//! Run with `cargo bench --bench mobilenet` (`-- dw/` the depthwise ones, `-- pw/` MobileNetV2's
//! pointwise ones, `-- rn/` ResNet-50's, `-- /2T/` one thread count, `-- /native/` one backend).

use collage::runtime::backend::dnnl::{DnnlBackend, Part};
use collage::runtime::backend::native::{Config as NativeConfig, Native};
use collage::runtime::exec::data::Weights;
use collage::runtime::exec::kernel::{Backend, MemCounter, Prepared, Unit};
use criterion::{criterion_group, criterion_main, Criterion};

#[path = "common/kernels.rs"]
mod kernels;
use kernels::{dnnl_setup, lazy_bench, load, run_prepared, tensors};
use std::time::Duration;

/// What follows a convolution's bias.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Epi {
    /// Nothing (MobileNetV2's projections).
    Bias,
    /// `clip(0, 6)` (MobileNetV2).
    Clip,
    /// `relu` (ResNet-50).
    Relu,
    /// The block's input added back, then `relu` (ResNet-50's last convolution of a block).
    SumRelu,
}

/// One convolution: input channels, output channels, input height = width, window, stride,
/// the epilogue, and the model it is from (`pw` MobileNetV2's pointwise, `rn` ResNet-50's).
struct Conv {
    c: usize,
    o: usize,
    hw: usize,
    k: usize,
    stride: usize,
    epi: Epi,
    model: &'static str,
}

impl Conv {
    fn depthwise(&self) -> bool {
        self.model == "dw"
    }

    fn name(&self) -> String {
        if self.depthwise() {
            return format!("dw/{}x{}x{} s{}", self.c, self.hw, self.hw, self.stride);
        }
        let mut name = format!(
            "{}/{}-{} {}x{}",
            self.model, self.c, self.o, self.hw, self.hw
        );
        if self.k > 1 {
            name.push_str(&format!(" {0}x{0}", self.k));
        }
        if self.stride > 1 {
            name.push_str(&format!(" s{}", self.stride));
        }
        if self.epi == Epi::SumRelu {
            name.push_str(" +sum");
        }
        name
    }

    /// The output's height = width.
    fn out(&self) -> usize {
        (self.hw + 2 * (self.k / 2) - self.k) / self.stride + 1
    }

    /// The input's, weight's and bias's shapes (and the summand's).
    fn params(&self) -> Vec<(&'static str, Vec<usize>, bool)> {
        let cg = if self.depthwise() { 1 } else { self.c };
        let mut p = vec![
            ("x", vec![1, self.c, self.hw, self.hw], false),
            ("w", vec![self.o, cg, self.k, self.k], true),
            ("bias", vec![self.o, 1, 1], true),
        ];
        if self.epi == Epi::SumRelu {
            p.push(("r", vec![1, self.o, self.out(), self.out()], false));
        }
        p
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
        match self.epi {
            Epi::Bias => conv,
            Epi::Clip => format!("clip({conv}, a_min=0f, a_max=6f)"),
            Epi::Relu => format!("nn.relu({conv})"),
            Epi::SumRelu => format!("nn.relu(add({conv}, %r))"),
        }
    }

    fn composite(&self) -> &'static str {
        match self.epi {
            Epi::Bias => "dnnl.conv2d_bias",
            Epi::Clip => "dnnl.conv2d_bias_clip",
            Epi::Relu => "dnnl.conv2d_bias_relu",
            Epi::SumRelu => "dnnl.conv2d_bias_sum_relu",
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
        let args: Vec<String> = self
            .params()
            .iter()
            .map(|(n, _, _)| format!("%{n}"))
            .collect();
        format!(
            "#[version = \"0.0.5\"]\n\
             def @part({decl}, Primitive=1, Compiler=\"dnnl\", global_symbol=\"part\") {{\n  \
             %100 = fn ({decl}, Composite=\"{}\") {{\n    {}\n  }};\n  \
             %100({})\n}}\n",
            self.composite(),
            self.body(),
            args.join(", ")
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
        epi: Epi::Clip,
        model: "dw",
    }
}

fn pw(c: usize, o: usize, hw: usize, clip: bool) -> Conv {
    Conv {
        c,
        o,
        hw,
        k: 1,
        stride: 1,
        epi: if clip { Epi::Clip } else { Epi::Bias },
        model: "pw",
    }
}

/// A pointwise convolution of ResNet-50: `relu` after the bias, or (`sum`) the block's input
/// added back first.
fn rn(c: usize, o: usize, hw: usize, stride: usize, sum: bool) -> Conv {
    Conv {
        c,
        o,
        hw,
        k: 1,
        stride,
        epi: if sum { Epi::SumRelu } else { Epi::Relu },
        model: "rn",
    }
}

/// A stride-1 3 × 3 convolution of ResNet-50 (bias and `relu`): the shapes whose oneDNN
/// partitions take Winograd's algorithm where oneDNN has it (`docs/backends.md`, "Winograd
/// convolutions"); generated code takes the implicit GEMM.
fn rn3(c: usize, hw: usize) -> Conv {
    Conv {
        c,
        o: c,
        hw,
        k: 3,
        stride: 1,
        epi: Epi::Relu,
        model: "rn",
    }
}

/// Every depthwise and pointwise shape of MobileNetV2 (expansions with clip, projections with
/// bias alone), ResNet-50's stride-1 3 × 3 shapes, and its pointwise shapes: per stage the first
/// reduction, the expansion with the sum, the later reductions, and the downsampling (stride 2
/// from the second stage on; its `relu` comes after the sum in the model, here it stands for
/// the projection's bias).
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
        pw(96, 24, 56, false),
        pw(24, 144, 56, true),
        pw(144, 24, 56, false),
        pw(144, 32, 28, false),
        pw(32, 192, 28, true),
        pw(192, 32, 28, false),
        pw(192, 64, 14, false),
        pw(64, 384, 14, true),
        pw(384, 64, 14, false),
        pw(384, 96, 14, false),
        pw(96, 576, 14, true),
        pw(576, 96, 14, false),
        pw(576, 160, 7, false),
        pw(160, 960, 7, true),
        pw(960, 160, 7, false),
        pw(960, 320, 7, false),
        pw(320, 1280, 7, true),
        rn3(64, 56),
        rn3(128, 28),
        rn3(256, 14),
        rn3(512, 7),
        rn(64, 64, 56, 1, false),
        rn(64, 256, 56, 1, true),
        rn(256, 64, 56, 1, false),
        rn(256, 128, 56, 1, false),
        rn(128, 512, 28, 1, true),
        rn(512, 128, 28, 1, false),
        rn(256, 512, 56, 2, false),
        rn(512, 256, 28, 1, false),
        rn(256, 1024, 14, 1, true),
        rn(1024, 256, 14, 1, false),
        rn(512, 1024, 28, 2, false),
        rn(1024, 512, 14, 1, false),
        rn(512, 2048, 7, 1, true),
        rn(2048, 512, 7, 1, false),
        rn(1024, 2048, 14, 2, false),
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
                |s| run_prepared(s, &omp, threads, &mem),
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
