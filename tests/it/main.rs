//! Integration tests: one binary, one module per area, driven by fixture files.

mod cli;
mod docs;
mod models;
mod relay;
mod robustness;
mod support;
