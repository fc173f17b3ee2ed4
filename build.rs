//! Compiles the ONNX schema subset (`grammar/onnx.proto`) into Rust with prost. The schema is
//! parsed by protox, in Rust, so no system `protoc` is needed. Every `bytes` field becomes a
//! `bytes::Bytes`, so decoding from a memory-mapped file does not copy tensor data.
//!
//! It also fingerprints the code that compiles and runs candidates (`src/runtime/backend`,
//! `src/runtime/exec`, `src/runtime/ffi`) as `COLLAGE_RUNTIME_CODE`: the measurement cache keys
//! its entries with it, so a cost measured with other kernels is never taken for these.

use std::path::{Path, PathBuf};

/// The files under `dir`, recursively, sorted.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// FNV-1a (64 bits) of the paths and contents of the runtime's sources.
fn runtime_fingerprint() -> String {
    let mut all = Vec::new();
    for d in ["src/runtime/backend", "src/runtime/exec", "src/runtime/ffi"] {
        println!("cargo:rerun-if-changed={d}");
        files(Path::new(d), &mut all);
    }
    all.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for p in &all {
        eat(p.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&std::fs::read(p).unwrap_or_default());
        eat(&[0]);
    }
    format!("{h:016x}")
}

fn main() {
    println!(
        "cargo:rustc-env=COLLAGE_RUNTIME_CODE={}",
        runtime_fingerprint()
    );
    println!("cargo:rerun-if-changed=grammar/onnx.proto");
    let fds = match protox::compile(["grammar/onnx.proto"], ["."]) {
        Ok(fds) => fds,
        Err(e) => panic!("grammar/onnx.proto: {e}"),
    };
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    if let Err(e) = config.compile_fds(fds) {
        panic!("generating the ONNX decoder: {e}");
    }
}
