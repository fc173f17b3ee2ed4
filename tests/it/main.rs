//! Integration tests: one binary, one module per area, driven by fixture files.

mod cli;
mod cpu_backends;
mod cpu_costs;
mod devices;
mod devices_props;
mod docs;
mod dsl;
mod enumerate;
mod enumerate_props;
mod exec;
mod exec_ops;
mod extract;
mod fuse;
mod generate;
mod hardening;
mod models;
mod mutate;
mod native;
mod output;
mod partition;
mod partition_e2e;
mod relay;
mod robustness;
mod robustness_dsl;
mod support;
mod work;
