//! Measures loading an ONNX model: wall time and the process's peak resident memory.
//!
//! `cargo run --release --example onnx_load -- write MODEL.onnx [LAYERS]` writes a GPT-2-sized
//! model (12 layers by default, about 500 MB); `cargo run --release --example onnx_load -- load
//! MODEL.onnx` loads it in a fresh process and prints the time, the weights' total size and the
//! peak resident set (`VmHWM` of `/proc/self/status`) against the file's size.

use collage::frontend::onnx::builder::write_gpt2_like;
use collage::frontend::onnx::load_file;
use std::path::Path;
use std::time::Instant;

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["write", path, rest @ ..] => {
            let layers = rest.first().and_then(|s| s.parse().ok()).unwrap_or(12);
            let size = write_gpt2_like(Path::new(path), layers).expect("writes the model");
            println!("wrote {path}: {layers} layers, {size} bytes");
        }
        ["load", path] => {
            let size = std::fs::metadata(path).expect("the model exists").len();
            let start = Instant::now();
            let model = match load_file(Path::new(path)) {
                Ok(m) => m,
                Err(ds) => {
                    for d in ds {
                        eprintln!("{}: {}", d.code.id, d.message);
                    }
                    std::process::exit(1);
                }
            };
            let elapsed = start.elapsed();
            let peak_loaded = peak_rss_bytes().unwrap_or(0);
            // Touch every weight byte once, as an importer copying nothing still reads them.
            let mut sum = 0u64;
            for w in &model.graph.weights {
                sum =
                    sum.wrapping_add(w.data.bytes().iter().step_by(4096).map(|&b| b as u64).sum());
            }
            let bytes: usize = model
                .graph
                .weights
                .iter()
                .map(|w| w.data.bytes().len())
                .sum();
            let peak = peak_rss_bytes().unwrap_or(0);
            println!(
                "loaded {path} in {:.1} ms: {} weights, {bytes} bytes, {} nodes (checksum {sum})",
                elapsed.as_secs_f64() * 1e3,
                model.graph.weights.len(),
                model.graph.nodes.len()
            );
            println!(
                "file {size} bytes, peak resident {peak_loaded} bytes after loading ({:.3}x the \
                 file), {peak} bytes after reading every page of the weights ({:.2}x)",
                peak_loaded as f64 / size as f64,
                peak as f64 / size as f64
            );
        }
        _ => {
            eprintln!("usage: onnx_load write MODEL.onnx [LAYERS] | onnx_load load MODEL.onnx");
            std::process::exit(2);
        }
    }
}
