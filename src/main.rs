//! The `collage` command-line tool: a thin layer over the library's driver.

use clap::{Parser, Subcommand};
use collage::driver::render::Format;
use collage::driver::{self, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;

/// Partitions ML models in TVM's Relay text format across backends.
#[derive(Parser, Debug)]
#[command(name = "collage", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The largest input file read (model, rules file, cost table): bytes, or with a suffix
    /// `K`, `M`, `G` (powers of 1024); at most 4G less one byte.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_size,
          default_value = "1G", allow_negative_numbers = true)]
    max_input_size: u64,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check `.rules` files (directories are searched for `*.rules`).
    Check {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print the compiled targets and rule trees.
        #[arg(long)]
        print: bool,
    },
    /// Parse and type-check a model; print canonical RelayScript, or its dataflow graph as JSON.
    Parse {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Print the dataflow graph of `@main` as JSON instead of RelayScript.
        #[arg(long)]
        json: bool,
        /// Leave out the ` /* ty=... */` comments on calls, tuples and projections.
        #[arg(long)]
        no_type_comments: bool,
        #[command(flatten)]
        output: ModuleOutput,
    },
    /// List the candidate partitions each target's rules produce for a model.
    Candidates {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Rules files or directories (default: the shipped library).
        #[arg(long, num_args = 1..)]
        rules: Vec<PathBuf>,
        /// Only these targets.
        #[arg(long = "target", value_name = "NAME")]
        targets: Vec<String>,
        #[command(flatten)]
        bounds: Bounds,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find the cheapest partitioning of `@main` across the targets, print the partitioned
    /// program (TVM's encoding) and a report with baselines.
    Partition {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Rules files or directories (default: the shipped library).
        #[arg(long, num_args = 1..)]
        rules: Vec<PathBuf>,
        /// Only these targets (the host is always used).
        #[arg(long = "target", value_name = "NAME")]
        targets: Vec<String>,
        /// Cost estimators, tried in order, joined by `+`: `analytic`, `measure`,
        /// `mock:FILE.json`, `table:FILE.json`, `cmd:COMMAND`.
        #[arg(long, value_name = "SPEC", default_value = "analytic")]
        costs: String,
        /// Time limit in seconds for one `cmd:` measurement.
        #[arg(
            long,
            value_name = "SECS",
            default_value_t = 60.0,
            allow_negative_numbers = true
        )]
        cost_timeout: f64,
        #[command(flatten)]
        bounds: Bounds,
        /// Write the partitioned program here (atomically) instead of printing it.
        #[arg(short = 'o', long = "output", value_name = "OUT.relay")]
        output: Option<PathBuf>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write a DOT picture of the partitioning here.
        #[arg(long, value_name = "FILE")]
        dot: Option<PathBuf>,
        /// Explain which candidates covered the node bound to `%BINDING` and why one won.
        #[arg(long, value_name = "BINDING")]
        explain: Vec<String>,
        /// Skip the baselines (single-target and greedy placements).
        #[arg(long)]
        no_baselines: bool,
        /// Search with plain Dijkstra instead of A* (same result, for comparison).
        #[arg(long)]
        dijkstra: bool,
        /// Prune candidates to the maximal ones per target plus bridges before searching
        /// (TVM's heuristic: faster on huge models, but no longer exact).
        #[arg(long)]
        prune: bool,
        /// Print the wall time of each phase on stderr.
        #[arg(long)]
        timings: bool,
        #[command(flatten)]
        module_output: ModuleOutput,
        #[command(flatten)]
        measure: MeasureFlags,
    },
    /// Plan the virtual device of every expression and print the planned module.
    PlanDevices {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Print the minimal representation: devices on parameters, let-bound variables and
        /// function results, plus the copies (the default).
        #[arg(long, conflicts_with = "complete")]
        minimal: bool,
        /// Print the complete representation: also the device of every expression, in comments.
        #[arg(long)]
        complete: bool,
        /// The device of whatever no annotation constrains: `cpu`, `cuda`, `cuda(1)`, ...
        #[arg(long, value_name = "DEV", default_value = "cpu", value_parser = parse_device)]
        default_device: collage::ir::VirtualDevice,
        /// Leave out the ` /* ty=... */` comments on calls, tuples and projections.
        #[arg(long)]
        no_type_comments: bool,
        #[command(flatten)]
        output: ModuleOutput,
    },
    /// Partition `@main` with TVM's greedy FuseOps algorithm and print the fused groups.
    Fuse {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Maximum number of nodes in one group (TVM's `relay.FuseOps.max_depth`).
        #[arg(long, value_name = "N", default_value_t = collage::analysis::fuse::DEFAULT_MAX_DEPTH, allow_negative_numbers = true)]
        max_depth: usize,
        /// Print the groups as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a model (partitioned or not) and report its outputs, latency and peak memory: the
    /// native operators as generated code, the oneDNN and OpenBLAS partitions on their libraries,
    /// everything else on the reference interpreter.
    Run {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Seed of the pseudo-random weights and inputs.
        #[arg(long, value_name = "N", default_value_t = collage::runtime::exec::data::DEFAULT_SEED, allow_negative_numbers = true)]
        seed: u64,
        /// An input from a NumPy file, by parameter name (without `%`); repeatable. Parameters
        /// not given are drawn from the seed.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Write the outputs as `output0.npy`, `output1.npy`, ... into this directory.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// Timed runs.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 1,
            allow_negative_numbers = true
        )]
        repeat: usize,
        /// Untimed runs before the timed ones.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 0,
            allow_negative_numbers = true
        )]
        warmup: usize,
        /// Worker threads (default: all cores).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        threads: Option<usize>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Also run this model on the same inputs and weights and compare the outputs
        /// (repeatable); exit 1 when they differ beyond the tolerance.
        #[arg(long, value_name = "OTHER.relay")]
        compare_with: Vec<PathBuf>,
        /// Relative tolerance of the comparison (default per dtype).
        #[arg(long, value_name = "X", allow_negative_numbers = true)]
        rtol: Option<f64>,
        /// Absolute tolerance of the comparison (default per dtype).
        #[arg(long, value_name = "X", allow_negative_numbers = true)]
        atol: Option<f64>,
        /// Which backends run the model: `auto` (each partition on the backend of its target
        /// where this machine has it: the native operators as generated code, `dnnl` and
        /// `openblas` partitions on their libraries) or `reference` (everything on the reference
        /// interpreter, the oracle; no library or compiler is needed).
        #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
        backend: BackendArg,
        /// The cache directory (default: `$COLLAGE_CACHE_DIR`, else `$XDG_CACHE_HOME/collage`,
        /// else `~/.cache/collage`).
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// The time limit of one C compiler run, in seconds (default 300).
        #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
        compile_timeout: Option<f64>,
        /// Also run the model on the reference interpreter and compare the outputs (default
        /// tolerances: rtol and atol 1e-4 for float32, 5e-2 for float16 and bfloat16).
        #[arg(long)]
        check_reference: bool,
        /// The most memory the model may need (constants, inputs and the peak of intermediate
        /// tensors, computed before anything is allocated): bytes, or with a suffix `K`, `M`,
        /// `G`, `T` (default: the memory available to this process).
        #[arg(long, value_name = "SIZE")]
        max_memory: Option<String>,
    },
    /// List the backends this machine has (reference interpreter, native C compiler, oneDNN,
    /// OpenBLAS): whether each is available, its library and version.
    Backends {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Partition a model with measured costs, then run the Collage plan and every baseline
    /// placement end to end and compare their latencies and outputs.
    Bench {
        /// The model file (`.relay`, or `.onnx`).
        model: PathBuf,
        #[command(flatten)]
        model_flags: ModelFlags,
        /// Rules files or directories (default: the shipped library).
        #[arg(long, num_args = 1..)]
        rules: Vec<PathBuf>,
        /// Only these targets (default: the targets that can run on this machine; the host is
        /// always used).
        #[arg(long = "target", value_name = "NAME")]
        targets: Vec<String>,
        /// Cost estimators, tried in order, joined by `+` (as for `partition`).
        #[arg(long, value_name = "SPEC", default_value = "measure")]
        costs: String,
        /// Time limit in seconds for one `cmd:` measurement.
        #[arg(
            long,
            value_name = "SECS",
            default_value_t = 60.0,
            allow_negative_numbers = true
        )]
        cost_timeout: f64,
        #[command(flatten)]
        bounds: Bounds,
        /// Time budget in seconds of the end-to-end timing, per placement (default 20; the
        /// placements are timed together in rounds, so N of them get N times this).
        #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
        run_budget: Option<f64>,
        /// Relative tolerance of the output check against the reference interpreter (default
        /// 1e-3 for float32, 5e-2 for float16).
        #[arg(long, value_name = "X", allow_negative_numbers = true)]
        rtol: Option<f64>,
        /// Absolute tolerance of the output check (default as `--rtol`).
        #[arg(long, value_name = "X", allow_negative_numbers = true)]
        atol: Option<f64>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write the comparison as an SVG bar chart here.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Also print, for each placement that ran, every partition's estimated cost beside
        /// the time its kernel took inside the whole model.
        #[arg(long)]
        profile: bool,
        /// The most memory the model may need (constants, inputs and the peak of intermediate
        /// tensors, computed before anything is allocated; default: the memory available to
        /// this process), and the resident memory the placements are built under: when they
        /// may not all fit at once, they are built, checked and timed in groups, each with one
        /// anchor placement (default 1.75 GiB, or the memory available if less). Bytes, or with
        /// a suffix `K`, `M`, `G`, `T`.
        #[arg(long, value_name = "SIZE")]
        max_memory: Option<String>,
        /// ONNX Runtime on the same file as one more placement (an ONNX model only).
        #[arg(long, value_enum, value_name = "WHEN", default_value_t = OrtArg::Auto)]
        onnxruntime: OrtArg,
        /// Make the whole comparison in N fresh processes, one after the other, and report
        /// each placement's latency in each and the spread of the speed-ups (1 to 100).
        #[arg(long, value_name = "N", default_value_t = 1)]
        processes: u64,
        #[command(flatten)]
        measure: MeasureFlags,
    },
    /// Inspect or empty the cache directory (compiled kernels and measured costs).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Generate a large model as RelayScript, for scaling benchmarks.
    Generate {
        #[command(subcommand)]
        model: GenerateModel,
    },
}

#[derive(Subcommand, Debug)]
enum GenerateModel {
    /// A GPT-2 whose layers are those of the corpus model `gpt2.relay` (12 layers is that model).
    Gpt2 {
        /// Transformer layers.
        #[arg(
            long,
            value_name = "N",
            default_value_t = 12,
            allow_negative_numbers = true
        )]
        layers: usize,
        /// Write the model to this file (atomically) instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A BERT-large-style encoder (hidden 1024, 16 heads, feed-forward 4096).
    Bert {
        /// Encoder layers.
        #[arg(long, value_name = "N", default_value_t = collage::frontend::gen::BERT_LARGE_LAYERS, allow_negative_numbers = true)]
        layers: usize,
        /// Tokens in the input sequence.
        #[arg(
            long,
            value_name = "S",
            default_value_t = 128,
            allow_negative_numbers = true
        )]
        seq: usize,
        /// Write the model to this file (atomically) instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// What `collage cache` does.
#[derive(Subcommand, Debug)]
enum CacheAction {
    /// Show what the cache holds.
    Stats {
        #[command(flatten)]
        place: CachePlace,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the compiled kernels and the measurements.
    Clear {
        #[command(flatten)]
        place: CachePlace,
        /// Remove only the compiled kernels.
        #[arg(long, conflicts_with = "measurements")]
        kernels: bool,
        /// Remove only the measurements.
        #[arg(long)]
        measurements: bool,
    },
}

/// Which cache (flattened into the `cache` subcommands).
#[derive(clap::Args, Clone, Debug)]
struct CachePlace {
    /// The cache directory (default: `$COLLAGE_CACHE_DIR`, else `$XDG_CACHE_HOME/collage`, else
    /// `~/.cache/collage`).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// The measurement database alone (default: `measurements.sqlite` in the cache directory).
    #[arg(long, value_name = "FILE")]
    cache: Option<PathBuf>,
}

/// Where and how `--costs measure` measures (flattened into `partition` and `bench`).
#[derive(clap::Args, Clone, Debug)]
struct MeasureFlags {
    /// Threads the candidates (and, for `bench`, the placements) run on (default: all cores).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    threads: Option<usize>,
    /// The cache directory for kernels and measurements (default: `$COLLAGE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/collage`, else `~/.cache/collage`).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// The measurement database alone (default: `measurements.sqlite` in the cache directory).
    #[arg(long, value_name = "FILE")]
    cache: Option<PathBuf>,
    /// Time budget in seconds of one candidate's measurement (default 1).
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    measure_budget: Option<f64>,
    /// Seed of the random weights and inputs of measurements.
    #[arg(long, value_name = "N", default_value_t = collage::runtime::exec::data::DEFAULT_SEED, allow_negative_numbers = true)]
    seed: u64,
    /// Show progress on stderr even when it is not a terminal (a line every few seconds).
    #[arg(long)]
    progress: bool,
    /// Time each call of a candidate alone, after evicting from the caches the buffers its
    /// kernels keep (weights, packed weights, scratch), as inside a whole model: the default on
    /// x86-64 processors (elsewhere candidates are timed warm, with a warning when this is asked
    /// for).
    #[arg(long, conflicts_with = "warm_candidates")]
    cold_candidates: bool,
    /// Time candidates in TVM's warm loop instead, their buffers staying in the caches from one
    /// call to the next (measurements of the two kinds are cached apart).
    #[arg(long)]
    warm_candidates: bool,
    /// Raise the scheduling weight of this session while measuring (`/proc/self/autogroup`;
    /// needs the right to raise priority), so other sessions' work disturbs timings less.
    #[arg(long)]
    raise_priority: bool,
}

impl MeasureFlags {
    fn args(&self) -> collage::pipeline::measuring::MeasureArgs {
        collage::pipeline::measuring::MeasureArgs {
            threads: self.threads,
            cache_dir: self.cache_dir.clone(),
            cache: self.cache.clone(),
            budget: self.measure_budget,
            seed: self.seed,
            warm: self.warm_candidates,
            cold: self.cold_candidates,
            raise_priority: self.raise_priority,
        }
    }
}

/// The limits of candidate enumeration: the depth limits, and the bounds whose reaching is an
/// error (E2201–E2203).
#[derive(clap::Args, Debug)]
struct Bounds {
    /// Depth limit for native targets' candidates [default: 8; lowered, with a warning, when
    /// the candidates outgrow the limits and neither depth flag is given]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    tvm_max_depth: Option<u32>,
    /// Depth limit for BYOC targets' candidates [default: 8; lowered as above]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    byoc_max_depth: Option<u32>,
    /// E-nodes the equivalences may add to the e-graph.
    #[arg(long, value_name = "N", default_value_t = collage::planning::enumerate::DEFAULT_MAX_ENODES as u64,
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    max_enodes: u64,
    /// Rounds of equivalence application before the e-graph must be saturated.
    #[arg(long, value_name = "N",
          default_value_t = collage::planning::enumerate::DEFAULT_MAX_EGRAPH_ITERS as u64,
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    max_egraph_iters: u64,
    /// Candidates one rule of a target may hold (the unions combining builds included).
    #[arg(long, value_name = "N",
          default_value_t = collage::planning::enumerate::DEFAULT_MAX_CANDIDATES as u64,
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    max_candidates: u64,
}

/// `--cost-timeout` as a duration; `None` (with the error printed) unless it is a positive
/// number of seconds.
fn cost_timeout_of(secs: f64) -> Option<std::time::Duration> {
    if secs.is_finite() && secs > 0.0 {
        Some(std::time::Duration::from_secs_f64(secs.min(1e6)))
    } else {
        driver::usage_error(
            collage::diag::E0953,
            format!("`--cost-timeout` must be a positive number of seconds, found {secs}"),
        );
        None
    }
}

/// The `--costs` specification, parsed (E2104, a usage error, when it is malformed).
fn costs_of(spec: &str) -> Option<collage::planning::cost::Spec> {
    collage::planning::cost::Spec::parse(spec)
        .map_err(|e| driver::usage_error(collage::diag::E2104, format!("invalid `--costs`: {e}")))
        .ok()
}

/// The enumeration limits of a command line.
fn limits(b: &Bounds) -> collage::planning::enumerate::Limits {
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let defaults = collage::planning::enumerate::Limits::default();
    collage::planning::enumerate::Limits {
        tvm_max_depth: b.tvm_max_depth.unwrap_or(defaults.tvm_max_depth).max(1),
        byoc_max_depth: b.byoc_max_depth.unwrap_or(defaults.byoc_max_depth).max(1),
        lower_depth: b.tvm_max_depth.is_none() && b.byoc_max_depth.is_none(),
        max_enodes: size(b.max_enodes),
        max_egraph_iters: size(b.max_egraph_iters),
        max_candidates: size(b.max_candidates),
    }
}

/// How the model file is read (flattened into every command that takes a model).
#[derive(clap::Args, Debug)]
struct ModelFlags {
    /// The model's format, when its extension does not say it: `relay` or `onnx` (a `.onnx`
    /// file is read as ONNX, anything else as Relay text).
    #[arg(long, value_name = "FORMAT", value_parser = parse_model_format)]
    model_format: Option<collage::pipeline::load::FrontEnd>,
    /// An ONNX input's whole shape, `NAME=D1xD2x...` (for example `x=1x3x224x224`);
    /// repeatable. Wins over `--dim` on that input.
    #[arg(long = "input-shape", value_name = "NAME=SHAPE")]
    input_shapes: Vec<String>,
    /// The size of every ONNX input dimension named SYMBOL, `SYMBOL=N` (for example
    /// `batch=1`); repeatable.
    #[arg(long = "dim", value_name = "SYMBOL=N")]
    dims: Vec<String>,
    /// Simplify the model before anything else (fold batch norms, constants, per-channel scales
    /// and shifts; drop identities and dead code; docs/simplify.md): the default of
    /// `partition`, `run` and `bench`.
    #[arg(long, conflicts_with = "no_simplify")]
    simplify: bool,
    /// Use the model as given, unsimplified: the default of `parse`, `candidates`, `fuse` and
    /// `plan-devices`.
    #[arg(long)]
    no_simplify: bool,
}

impl ModelFlags {
    /// The options of a command that shows the model as given unless `--simplify`.
    fn options(&self) -> collage::pipeline::load::ModelOptions {
        self.options_with(false, collage::runtime::exec::data::DEFAULT_SEED)
    }

    /// The options of a command that simplifies unless `--no-simplify`, binding constants
    /// drawn from `seed`.
    fn simplified(&self, seed: u64) -> collage::pipeline::load::ModelOptions {
        self.options_with(true, seed)
    }

    fn options_with(&self, default: bool, seed: u64) -> collage::pipeline::load::ModelOptions {
        let on = (default || self.simplify) && !self.no_simplify;
        collage::pipeline::load::ModelOptions {
            format: self.model_format,
            input_shapes: self.input_shapes.clone(),
            dims: self.dims.clone(),
            file_shapes: Vec::new(),
            simplify: on.then_some(collage::runtime::simplify::Options { seed }),
        }
    }
}

fn parse_model_format(text: &str) -> Result<collage::pipeline::load::FrontEnd, String> {
    collage::pipeline::load::FrontEnd::parse(text)
        .ok_or_else(|| format!("`{text}` is not a model format (expected `relay` or `onnx`)"))
}

/// How a command that prints a module prints it (flattened into each such command).
#[derive(clap::Args, Clone, Copy, Debug)]
struct ModuleOutput {
    /// Print the module as TVM 0.19 reads it: virtual devices as `meta[VirtualDevice][i]` in a
    /// `#[metadata]` section, a let-bound variable's device as an `on_device` around its value.
    #[arg(long)]
    tvm_compat: bool,
}

impl ModuleOutput {
    fn options(self, type_comments: bool) -> collage::frontend::relay::print::PrintOptions {
        collage::frontend::relay::print::PrintOptions {
            type_comments,
            tvm_compat: self.tvm_compat,
        }
    }
}

/// `collage run --backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BackendArg {
    /// Every partition on the backend for its target where this machine has it (the native
    /// operators as generated code, compiled by the system C compiler; the `dnnl` and
    /// `openblas` partitions on their libraries).
    Auto,
    /// Everything on the reference interpreter.
    Reference,
}

/// `collage bench --onnxruntime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OrtArg {
    /// For an ONNX model; skipped with a warning where the library is missing.
    Auto,
    /// Required: an error where the model is not an ONNX file or the library is missing.
    Always,
    /// Never.
    Never,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(clap_outcome(&e)),
    };
    // Deeply nested inputs are rejected by the parser's depth limit; the large stack is a margin
    // for debug builds.
    let worker = std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || run(cli));
    let outcome = match worker {
        Ok(handle) => handle.join().unwrap_or(Outcome::Internal),
        Err(_) => run_fallback(),
    };
    ExitCode::from(outcome.exit_code())
}

/// Prints what the command line parser stopped with (a usage error on standard error; help or
/// the version on standard output) and gives the exit code: 2 for a usage error, 0 for help or
/// the version, and 2 (E0902) when the help or the version could not be written (a full disk,
/// `/dev/full`), as for any command's output; a closed pipe stays quiet.
fn clap_outcome(e: &clap::Error) -> u8 {
    if e.use_stderr() {
        collage::diag::emit_alone(usage_diagnostic(&e.render().to_string()));
        return u8::try_from(e.exit_code()).unwrap_or(2);
    }
    let printed = e.print();
    let written = printed.and_then(|()| std::io::Write::flush(&mut std::io::stdout()));
    driver::written(driver::stdout_written(written)).exit_code()
}

/// The command-line parser's message as a coded diagnostic (E0957): its first line is the
/// message, the rest (usage, tips) become notes; user text in it is escaped when rendered.
fn usage_diagnostic(rendered: &str) -> collage::diag::Diagnostic {
    let mut lines = rendered.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid command line");
    let message = first.strip_prefix("error:").map_or(first, str::trim);
    lines.fold(
        collage::diag::Diagnostic::error(collage::diag::E0957, message),
        |d, l| d.with_note(l),
    )
}

/// `--max-input-size`: a size as `--max-memory` takes it (`collage::runtime::exec::memory::parse_size`),
/// within the 32-bit span limit.
fn parse_size(text: &str) -> Result<u64, String> {
    let bytes = collage::runtime::exec::memory::parse_size(text)?;
    if bytes > collage::source::MAX_INPUT_BYTES_CEILING {
        return Err(format!(
            "`{text}` is out of range: the limit must be between 1 byte and 4G less one byte"
        ));
    }
    Ok(bytes)
}

fn parse_device(text: &str) -> Result<collage::ir::VirtualDevice, String> {
    driver::parse_device_arg(text).ok_or_else(|| {
        format!("`{text}` is not a device (expected e.g. `cpu`, `cuda` or `cuda(1)`)")
    })
}

fn run_fallback() -> Outcome {
    eprintln!("error: could not start the worker thread");
    Outcome::Internal
}

fn run(cli: Cli) -> Outcome {
    collage::source::set_max_input_bytes(cli.max_input_size);
    match cli.command {
        Command::Check { paths, print } => driver::check_command(&paths, print),
        Command::Parse {
            model,
            model_flags,
            json,
            no_type_comments,
            output,
        } => driver::parse_command(
            &model,
            &model_flags.options(),
            json,
            output.options(!no_type_comments),
        ),
        Command::Candidates {
            model,
            model_flags,
            rules,
            targets,
            bounds,
            json,
        } => {
            let limits = limits(&bounds);
            driver::candidates_command(
                &model,
                &model_flags.options(),
                &rules,
                &targets,
                limits,
                json,
            )
        }
        Command::PlanDevices {
            model,
            model_flags,
            minimal: _,
            complete,
            default_device,
            no_type_comments,
            output,
        } => {
            let form = if complete {
                driver::DeviceForm::Complete
            } else {
                driver::DeviceForm::Minimal
            };
            let opts = output.options(!no_type_comments);
            driver::plan_devices_command(
                &model,
                &model_flags.options(),
                form,
                &default_device,
                opts,
            )
        }
        Command::Fuse {
            model,
            model_flags,
            max_depth,
            json,
        } => driver::fuse_command(&model, &model_flags.options(), max_depth, json),
        Command::Partition {
            model,
            model_flags,
            rules,
            targets,
            costs,
            cost_timeout,
            bounds,
            output,
            format,
            dot,
            explain,
            no_baselines,
            dijkstra,
            prune,
            timings,
            module_output,
            measure,
        } => {
            let Some(cmd_timeout) = cost_timeout_of(cost_timeout) else {
                return Outcome::Usage;
            };
            let Some(costs) = costs_of(&costs) else {
                return Outcome::Usage;
            };
            let req = driver::partition::Request {
                model,
                model_options: model_flags.simplified(measure.seed),
                rules,
                targets,
                costs,
                cmd_timeout,
                limits: limits(&bounds),
                output,
                format,
                dot,
                explain,
                baselines: !no_baselines,
                lower_bound: !dijkstra,
                prune,
                timings,
                print: module_output.options(true),
                measure: measure.args(),
                progress: measure.progress,
            };
            driver::partition::partition_command(&req)
        }
        Command::Bench {
            model,
            model_flags,
            rules,
            targets,
            costs,
            cost_timeout,
            bounds,
            run_budget,
            rtol,
            atol,
            format,
            plot,
            profile,
            max_memory,
            onnxruntime,
            processes,
            measure,
        } => {
            let Some(cmd_timeout) = cost_timeout_of(cost_timeout) else {
                return Outcome::Usage;
            };
            let max = driver::bench::processes::MAX_PROCESSES as u64;
            if !(1..=max).contains(&processes) {
                return collage::pipeline::usage_error(
                    collage::diag::E2430,
                    format!("--processes is {processes}: it must be between 1 and {max}"),
                );
            }
            let Some(costs) = costs_of(&costs) else {
                return Outcome::Usage;
            };
            driver::bench::bench_command(&driver::bench::Request {
                model,
                model_options: model_flags.simplified(measure.seed),
                rules,
                targets,
                costs,
                cmd_timeout,
                limits: limits(&bounds),
                measure: measure.args(),
                run_budget,
                format,
                plot,
                profile,
                rtol,
                atol,
                progress: measure.progress,
                max_memory,
                onnxruntime: match onnxruntime {
                    OrtArg::Auto => collage::pipeline::onnxruntime::When::Auto,
                    OrtArg::Always => collage::pipeline::onnxruntime::When::Always,
                    OrtArg::Never => collage::pipeline::onnxruntime::When::Never,
                },
                processes: processes as usize,
            })
        }
        Command::Cache { action } => match action {
            CacheAction::Stats { place, json } => {
                driver::cache::stats_command(&driver::cache::Request {
                    cache_dir: place.cache_dir,
                    cache: place.cache,
                    json,
                    ..Default::default()
                })
            }
            CacheAction::Clear {
                place,
                kernels,
                measurements,
            } => driver::cache::clear_command(&driver::cache::Request {
                cache_dir: place.cache_dir,
                cache: place.cache,
                kernels_only: kernels,
                measurements_only: measurements,
                json: false,
            }),
        },
        Command::Run {
            model,
            model_flags,
            seed,
            inputs,
            output_dir,
            repeat,
            warmup,
            threads,
            format,
            compare_with,
            rtol,
            atol,
            backend,
            cache_dir,
            compile_timeout,
            check_reference,
            max_memory,
        } => driver::run::run_command(&driver::run::Request {
            model,
            model_options: model_flags.simplified(seed),
            seed,
            inputs,
            output_dir,
            repeat,
            warmup,
            threads,
            format,
            compare_with,
            rtol,
            atol,
            backend: match backend {
                BackendArg::Auto => driver::run::BackendChoice::Auto,
                BackendArg::Reference => driver::run::BackendChoice::Reference,
            },
            cache_dir,
            compile_timeout,
            check_reference,
            max_memory,
        }),
        Command::Backends { format } => driver::backends::backends_command(format == Format::Json),
        Command::Generate { model } => match model {
            GenerateModel::Gpt2 { layers, output } => {
                driver::generate_command(driver::Generated::Gpt2 { layers }, output.as_deref())
            }
            GenerateModel::Bert {
                layers,
                seq,
                output,
            } => {
                driver::generate_command(driver::Generated::Bert { layers, seq }, output.as_deref())
            }
        },
    }
}
