//! The shipped rules library (`rules/*.rules`), embedded in the binary so that commands work
//! without `--rules`: the texts only. The checker reads them through
//! [`crate::rules::sema::Provider::Embedded`], falls back to them for imports it does not find on disk,
//! and [`crate::rules::sema::check_library`] compiles them.

/// `(path, text)` of every shipped file; imports between them resolve within this table.
pub const LIBRARY: &[(&str, &str)] = &[
    (
        "rules/prelude.rules",
        include_str!("../../rules/prelude.rules"),
    ),
    ("rules/tvm.rules", include_str!("../../rules/tvm.rules")),
    (
        "rules/cublas.rules",
        include_str!("../../rules/cublas.rules"),
    ),
    ("rules/cudnn.rules", include_str!("../../rules/cudnn.rules")),
    (
        "rules/cutlass.rules",
        include_str!("../../rules/cutlass.rules"),
    ),
    ("rules/dnnl.rules", include_str!("../../rules/dnnl.rules")),
    (
        "rules/openblas.rules",
        include_str!("../../rules/openblas.rules"),
    ),
    (
        "rules/tensorrt.rules",
        include_str!("../../rules/tensorrt.rules"),
    ),
];

/// The root files of the library, in load order.
pub fn roots() -> Vec<std::path::PathBuf> {
    LIBRARY
        .iter()
        .map(|(p, _)| std::path::PathBuf::from(p))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn library_lists_every_shipped_file() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| format!("rules/{}", e.file_name().to_string_lossy()))
            .filter(|n| n.ends_with(".rules"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = super::LIBRARY.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(
            on_disk, embedded,
            "src/rules/library.rs must embed every rules/*.rules"
        );
    }
}
