//! `collage generate`: writes a generated model ([`crate::frontend::gen`]) to standard output or a file.

use super::Outcome;
use std::path::Path;

/// The largest number of layers `collage generate` accepts (a 4096-layer GPT-2 is about 20 MB
/// of text).
pub const MAX_GENERATED_LAYERS: usize = 4096;

/// The longest sequence `collage generate bert` accepts.
pub const MAX_GENERATED_SEQ: usize = 65536;

/// Which model to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Generated {
    /// [`crate::frontend::gen::gpt2`] with this many layers.
    Gpt2 {
        /// Transformer layers.
        layers: usize,
    },
    /// [`crate::frontend::gen::bert_large`] with this many layers and this sequence length.
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
        return super::usage_error(
            crate::diag::E0954,
            format!("`--layers` must be between 1 and {MAX_GENERATED_LAYERS}, found {layers}"),
        );
    }
    if seq == 0 || seq > MAX_GENERATED_SEQ {
        return super::usage_error(
            crate::diag::E0954,
            format!("`--seq` must be between 1 and {MAX_GENERATED_SEQ}, found {seq}"),
        );
    }
    let text = match what {
        Generated::Gpt2 { layers } => crate::frontend::gen::gpt2(layers),
        Generated::Bert { layers, seq } => crate::frontend::gen::bert_large(layers, seq),
    };
    if let Some(path) = output {
        return super::written(super::write_output(path, &text));
    }
    super::written(super::out(&text))
}
