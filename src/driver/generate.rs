//! `collage generate`: writes a generated model ([`crate::gen`]) to standard output or a file.

use super::Outcome;
use crate::diag::E0902;
use std::io::Write;
use std::path::Path;

/// The largest number of layers `collage generate` accepts (a 4096-layer GPT-2 is about 20 MB
/// of text).
pub const MAX_GENERATED_LAYERS: usize = 4096;

/// The longest sequence `collage generate bert` accepts.
pub const MAX_GENERATED_SEQ: usize = 65536;

/// Which model to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generated {
    /// [`crate::gen::gpt2`] with this many layers.
    Gpt2 {
        /// Transformer layers.
        layers: usize,
    },
    /// [`crate::gen::bert_large`] with this many layers and this sequence length.
    Bert {
        /// Encoder layers.
        layers: usize,
        /// Tokens in the sequence.
        seq: usize,
    },
}

/// `collage generate gpt2|bert ... [-o FILE]`: prints the model, or writes it atomically to
/// `output`. Out-of-range sizes are usage errors.
pub fn generate_command(what: Generated, output: Option<&Path>) -> Outcome {
    let (layers, seq) = match what {
        Generated::Gpt2 { layers } => (layers, 1),
        Generated::Bert { layers, seq } => (layers, seq),
    };
    if layers == 0 || layers > MAX_GENERATED_LAYERS {
        eprintln!("error: --layers must be between 1 and {MAX_GENERATED_LAYERS}, found {layers}");
        return Outcome::Usage;
    }
    if seq == 0 || seq > MAX_GENERATED_SEQ {
        eprintln!("error: --seq must be between 1 and {MAX_GENERATED_SEQ}, found {seq}");
        return Outcome::Usage;
    }
    let text = match what {
        Generated::Gpt2 { layers } => crate::gen::gpt2(layers),
        Generated::Bert { layers, seq } => crate::gen::bert_large(layers, seq),
    };
    let written = match output {
        Some(path) => write_atomically(path, text.as_bytes()),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|_| out.flush())
        }
    };
    match written {
        Ok(()) => Outcome::Ok,
        Err(e) => {
            let target = output.map_or("standard output".to_string(), |p| {
                format!("`{}`", p.display())
            });
            eprintln!("error[{}]: cannot write {target}: {e}", E0902.id);
            Outcome::Usage
        }
    }
}

/// Writes `bytes` to a temporary file next to `path` and renames it over `path`, so readers see
/// either the old file or the complete new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the output path names no file"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    let result = result.and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
