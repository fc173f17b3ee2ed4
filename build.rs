//! Compiles the ONNX schema subset (`grammar/onnx.proto`) into Rust with prost. The schema is
//! parsed by protox, in Rust, so no system `protoc` is needed. Every `bytes` field becomes a
//! `bytes::Bytes`, so decoding from a memory-mapped file does not copy tensor data.

fn main() {
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
