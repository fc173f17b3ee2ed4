//! The `collage` command-line tool: a thin layer over the library's driver.

use clap::{Parser, Subcommand};
use collage::driver::{self, Outcome};
use std::path::PathBuf;
use std::process::ExitCode;

/// Partitions ML models in TVM's Relay text format across backends.
#[derive(Parser, Debug)]
#[command(name = "collage", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// The model file (`.relay`).
        model: PathBuf,
        /// Print the dataflow graph of `@main` as JSON instead of RelayScript.
        #[arg(long)]
        json: bool,
        /// Leave out the ` /* ty=... */` comments on calls, tuples and projections.
        #[arg(long)]
        no_type_comments: bool,
    },
    /// List the candidate partitions each target's rules produce for a model.
    Candidates {
        /// The model file (`.relay`).
        model: PathBuf,
        /// Rules files or directories (default: the shipped library).
        #[arg(long, num_args = 1..)]
        rules: Vec<PathBuf>,
        /// Only these targets.
        #[arg(long = "target", value_name = "NAME")]
        targets: Vec<String>,
        /// Depth limit for native targets' candidates.
        #[arg(long, value_name = "N", default_value_t = 8)]
        tvm_max_depth: u32,
        /// Depth limit for BYOC targets' candidates.
        #[arg(long, value_name = "N", default_value_t = 8)]
        byoc_max_depth: u32,
        #[command(flatten)]
        bounds: Bounds,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Find the cheapest partitioning of `@main` across the targets, print the partitioned
    /// program (TVM's encoding) and a report with baselines.
    Partition {
        /// The model file (`.relay`).
        model: PathBuf,
        /// Rules files or directories (default: the shipped library).
        #[arg(long, num_args = 1..)]
        rules: Vec<PathBuf>,
        /// Only these targets (the host is always used).
        #[arg(long = "target", value_name = "NAME")]
        targets: Vec<String>,
        /// Cost estimators, tried in order, joined by `+`: `analytic`, `mock:FILE.json`,
        /// `table:FILE.json`, `cmd:COMMAND`.
        #[arg(long, value_name = "SPEC", default_value = "analytic")]
        costs: String,
        /// Time limit in seconds for one `cmd:` measurement.
        #[arg(long, value_name = "SECS", default_value_t = 60.0)]
        cost_timeout: f64,
        /// Depth limit for native targets' candidates.
        #[arg(long, value_name = "N", default_value_t = 8)]
        tvm_max_depth: u32,
        /// Depth limit for BYOC targets' candidates.
        #[arg(long, value_name = "N", default_value_t = 8)]
        byoc_max_depth: u32,
        #[command(flatten)]
        bounds: Bounds,
        /// Write the partitioned program here (atomically) instead of printing it.
        #[arg(short = 'o', long = "output", value_name = "OUT.relay")]
        output: Option<PathBuf>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = FormatArg::Table)]
        format: FormatArg,
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
    },
    /// Plan the virtual device of every expression and print the planned module.
    PlanDevices {
        /// The model file (`.relay`).
        model: PathBuf,
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
    },
    /// Partition `@main` with TVM's greedy FuseOps algorithm and print the fused groups.
    Fuse {
        /// The model file (`.relay`).
        model: PathBuf,
        /// Maximum number of nodes in one group (TVM's `relay.FuseOps.max_depth`).
        #[arg(long, value_name = "N", default_value_t = collage::fuse::DEFAULT_MAX_DEPTH)]
        max_depth: usize,
        /// Print the groups as JSON.
        #[arg(long)]
        json: bool,
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
        #[arg(long, value_name = "N", default_value_t = 12)]
        layers: usize,
        /// Write the model to this file (atomically) instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// A BERT-large-style encoder (hidden 1024, 16 heads, feed-forward 4096).
    Bert {
        /// Encoder layers.
        #[arg(long, value_name = "N", default_value_t = collage::gen::BERT_LARGE_LAYERS)]
        layers: usize,
        /// Tokens in the input sequence.
        #[arg(long, value_name = "S", default_value_t = 128)]
        seq: usize,
        /// Write the model to this file (atomically) instead of standard output.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// The bounds of candidate enumeration (reaching one is an error, E2201–E2203).
#[derive(clap::Args, Debug)]
struct Bounds {
    /// E-nodes the equivalences may add to the e-graph.
    #[arg(long, value_name = "N", default_value_t = collage::enumerate::DEFAULT_MAX_ENODES as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_enodes: u64,
    /// Rounds of equivalence application before the e-graph must be saturated.
    #[arg(long, value_name = "N",
          default_value_t = collage::enumerate::DEFAULT_MAX_EGRAPH_ITERS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_egraph_iters: u64,
    /// Candidates one rule of a target may hold (the unions combining builds included).
    #[arg(long, value_name = "N",
          default_value_t = collage::enumerate::DEFAULT_MAX_CANDIDATES as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_candidates: u64,
}

/// The enumeration limits of a command line.
fn limits(tvm_max_depth: u32, byoc_max_depth: u32, b: &Bounds) -> collage::enumerate::Limits {
    let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    collage::enumerate::Limits {
        tvm_max_depth: tvm_max_depth.max(1),
        byoc_max_depth: byoc_max_depth.max(1),
        max_enodes: size(b.max_enodes),
        max_egraph_iters: size(b.max_egraph_iters),
        max_candidates: size(b.max_candidates),
    }
}

/// Report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    /// A table.
    Table,
    /// JSON.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match cli.command {
        Command::Check { paths, print } => driver::check_command(&paths, print),
        Command::Parse {
            model,
            json,
            no_type_comments,
        } => driver::parse_command(&model, json, !no_type_comments),
        Command::Candidates {
            model,
            rules,
            targets,
            tvm_max_depth,
            byoc_max_depth,
            bounds,
            json,
        } => {
            let limits = limits(tvm_max_depth, byoc_max_depth, &bounds);
            driver::candidates_command(&model, &rules, &targets, limits, json)
        }
        Command::PlanDevices {
            model,
            minimal: _,
            complete,
            default_device,
            no_type_comments,
        } => {
            let form = if complete {
                driver::DeviceForm::Complete
            } else {
                driver::DeviceForm::Minimal
            };
            driver::plan_devices_command(&model, form, &default_device, !no_type_comments)
        }
        Command::Fuse {
            model,
            max_depth,
            json,
        } => driver::fuse_command(&model, max_depth, json),
        Command::Partition {
            model,
            rules,
            targets,
            costs,
            cost_timeout,
            tvm_max_depth,
            byoc_max_depth,
            bounds,
            output,
            format,
            dot,
            explain,
            no_baselines,
            dijkstra,
            prune,
            timings,
        } => {
            if !(cost_timeout.is_finite() && cost_timeout > 0.0) {
                eprintln!("error: `--cost-timeout` must be a positive number of seconds");
                return Outcome::Usage;
            }
            let req = driver::partition::Request {
                model,
                rules,
                targets,
                costs,
                cmd_timeout: std::time::Duration::from_secs_f64(cost_timeout.min(1e6)),
                limits: limits(tvm_max_depth, byoc_max_depth, &bounds),
                output,
                format: match format {
                    FormatArg::Table => driver::partition::Format::Table,
                    FormatArg::Json => driver::partition::Format::Json,
                },
                dot,
                explain,
                baselines: !no_baselines,
                lower_bound: !dijkstra,
                prune,
                timings,
            };
            driver::partition::partition_command(&req)
        }
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
