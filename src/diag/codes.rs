//! The stable diagnostic codes. Every code here is documented in `docs/diagnostics.md` (a test
//! checks this); codes are never reused for a different meaning.
//!
//! Ranges: `E01xx` lexical, `E02xx` syntax, `E03xx` names, `E04xx` calls and attributes,
//! `E05xx` types, `E06xx` meta references and the metadata section, `E07xx` devices, `E09xx`
//! files and I/O (`E095x`-`E097x`: command-line flags and their limits), `E10xx`-`E18xx` the
//! rules language, `E21xx` partitioning, `E22xx` the bounds of candidate enumeration, `E23xx`
//! execution, `E24xx` measurement (`E2440`-`E2459` ONNX Runtime), `E30xx` the ONNX front end
//! (decoding, weights, validation, shape binding and folding), `E3900`-`E3919` the Python
//! API. A `W` code is a warning numbered
//! in the same ranges (its number differs from every `E` code's).

use super::Code;

macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $id:literal, $title:literal;)*) => {
        $( $(#[$doc])* pub const $name: Code = Code { id: $id, title: $title }; )*
        /// Every code, in numeric order.
        pub const ALL_CODES: &[Code] = &[$($name),*];
    };
}

codes! {
    /// A character that starts no token.
    E0101 = "E0101", "invalid character";
    /// A string literal without its closing quote.
    E0102 = "E0102", "unterminated string";
    /// A `/*` comment without its matching `*/`.
    E0103 = "E0103", "unterminated block comment";
    /// A numeric literal that is not a valid integer or float.
    E0104 = "E0104", "malformed numeric literal";
    /// A numeric literal whose value does not fit its type.
    E0105 = "E0105", "numeric literal out of range";
    /// A numeric suffix with an unsupported bit width, such as `1i8`.
    E0106 = "E0106", "unsupported literal width";
    /// A `meta[...]` reference that is not of the form `meta[key][index]`.
    E0107 = "E0107", "malformed meta reference";
    /// A `#[...]` header other than `#[version = "0.0.5"]` or `#[metadata]`.
    E0108 = "E0108", "unknown module attribute";
    /// An unknown escape sequence in a string literal.
    E0109 = "E0109", "invalid string escape";

    /// A token that does not fit the grammar at that point.
    E0201 = "E0201", "unexpected token";
    /// A module without the `#[version = "0.0.5"]` header.
    E0202 = "E0202", "missing version header";
    /// A version header naming a version other than 0.0.5.
    E0203 = "E0203", "unsupported version";
    /// Expressions or types nested more deeply than the parser allows.
    E0204 = "E0204", "nesting too deep";
    /// A Relay construct this tool does not support (ADTs, match, references).
    E0205 = "E0205", "unsupported construct";
    /// A `/* ty=... */` comment whose content is not a type.
    E0206 = "E0206", "malformed type comment";

    /// A `%name` that is not a parameter or let-bound variable in scope.
    E0301 = "E0301", "undefined variable";
    /// A `%N` used before it is bound in the enclosing function.
    E0302 = "E0302", "undefined graph binding";
    /// A `%N` bound twice in the same function.
    E0303 = "E0303", "graph binding redefined";
    /// Two `def`s with the same name.
    E0304 = "E0304", "duplicate global definition";
    /// A name in callee position that is not a registered operator.
    E0305 = "E0305", "unknown operator";
    /// An `@name` with no `def`.
    E0306 = "E0306", "undefined global";
    /// Two parameters of one function with the same name.
    E0307 = "E0307", "duplicate parameter";

    /// An operator called with the wrong number of arguments.
    E0401 = "E0401", "wrong number of operator arguments";
    /// An attribute name the operator does not declare.
    E0402 = "E0402", "unknown attribute";
    /// An attribute value of the wrong kind for its field.
    E0403 = "E0403", "attribute type mismatch";
    /// The same attribute given twice in one call.
    E0404 = "E0404", "duplicate attribute";
    /// Attributes on a call whose callee is not an operator.
    E0405 = "E0405", "attributes on non-operator call";
    /// A malformed virtual device: bad literal, bad braces on a binder, or a device clash.
    E0406 = "E0406", "invalid virtual device";

    /// An operator's type relation rejected its argument types.
    E0501 = "E0501", "type error in operator call";
    /// A dtype name that is not a valid TVM dtype.
    E0502 = "E0502", "unknown dtype";
    /// A type that cannot be inferred without an annotation.
    E0503 = "E0503", "cannot infer type";
    /// An annotated type that differs from the inferred type.
    E0504 = "E0504", "type annotation mismatch";
    /// A call whose callee is not a function.
    E0505 = "E0505", "call of a non-function";
    /// A function called with the wrong number of arguments or argument types.
    E0506 = "E0506", "function call mismatch";
    /// A projection `.N` of a non-tuple or past the end of a tuple.
    E0507 = "E0507", "invalid tuple projection";
    /// An `if` with a non-boolean condition or branches of different types.
    E0508 = "E0508", "invalid if expression";
    /// A type form this tool does not support (type variables, ADT types).
    E0509 = "E0509", "unsupported type";
    /// An inferred type nested more deeply than allowed (tuples of tuples of ...).
    E0510 = "E0510", "type nested too deeply";

    /// The `#[metadata]` section is not valid metadata JSON.
    E0601 = "E0601", "malformed metadata section";
    /// A `meta[key][i]` that the metadata section does not define.
    E0602 = "E0602", "unresolved meta reference";
    /// A constant whose type is known neither from metadata nor from a `/* ty=... */` comment.
    E0603 = "E0603", "constant without type";
    /// A metadata object of a kind that cannot appear where it is used.
    E0604 = "E0604", "meta reference of the wrong kind";
    /// A `/* ty=... */` comment that contradicts the metadata section.
    E0605 = "E0605", "constant type mismatch";

    /// Two annotations that require one value to be on different virtual devices.
    E0701 = "E0701", "conflicting virtual devices";
    /// A function value whose device domain has another shape than where it is used.
    E0702 = "E0702", "device domain shape mismatch";
    /// A function parameter, let-bound variable or function result without a virtual device in
    /// the minimal representation.
    E0703 = "E0703", "missing critical virtual device";
    /// A value used on another device than its own, with no `device_copy` between them.
    E0704 = "E0704", "device mismatch without copy";

    /// A file that cannot be read.
    E0901 = "E0901", "cannot read file";
    /// An output file that cannot be written.
    E0902 = "E0902", "cannot write file";
    /// An output path that names an input or another output of the same command.
    E0903 = "E0903", "output path collides";
    /// A module without `def @main`, given to a command that works on `@main`.
    E0904 = "E0904", "no @main function";
    /// A model flag that does not apply to the model's format (`--input-shape` on Relay text).
    E0905 = "E0905", "flag does not apply to this model";

    /// `--repeat` or `--warmup` outside its range.
    E0950 = "E0950", "run count out of range";
    /// `--threads` outside its range.
    E0951 = "E0951", "thread count out of range";
    /// `--rtol` or `--atol` that is not a non-negative number.
    E0952 = "E0952", "invalid tolerance";
    /// A time flag (`--cost-timeout`, `--compile-timeout`, `--measure-budget`, `--run-budget`)
    /// that is not a positive number of seconds.
    E0953 = "E0953", "invalid time limit";
    /// `generate --layers` or `--seq` outside its range.
    E0954 = "E0954", "generated model size out of range";
    /// A `--max-memory` value that is not a size.
    E0955 = "E0955", "invalid memory limit";
    /// A `--target` that names no target of the rules.
    E0956 = "E0956", "unknown target";
    /// A command line the argument parser refuses: an unknown flag or command, a missing or
    /// malformed value.
    E0957 = "E0957", "invalid command line";

    /// A `.rules` text that does not fit the grammar.
    E1001 = "E1001", "syntax error in rules";
    /// A malformed literal in a `.rules` file (bad escape, number out of range).
    E1002 = "E1002", "malformed literal in rules";
    /// A rules file whose bytes are not UTF-8.
    E1003 = "E1003", "rules file is not valid UTF-8";

    /// An import that cannot be read.
    E1101 = "E1101", "cannot import file";
    /// Files that import each other in a cycle.
    E1102 = "E1102", "import cycle";
    /// A name that is not defined in the file or its imports.
    E1201 = "E1201", "undefined name";
    /// A name defined twice in one scope.
    E1202 = "E1202", "duplicate definition";
    /// A name used as something it is not (a pattern where a rule is expected, ...).
    E1203 = "E1203", "wrong kind of name";
    /// A definition nothing uses (a warning).
    W1204 = "W1204", "unused definition";
    /// A definition that refers to itself.
    E1205 = "E1205", "recursive definition";
    /// An operator name that is not registered.
    E1301 = "E1301", "unknown operator in rules";
    /// A call pattern whose argument count differs from the operator's arity.
    E1302 = "E1302", "operator arity mismatch in pattern";
    /// An attribute the operator does not have.
    E1303 = "E1303", "unknown attribute in rules";
    /// An attribute constraint whose value does not fit the attribute.
    E1304 = "E1304", "attribute value mismatch in rules";
    /// Constraints that no value can satisfy.
    E1305 = "E1305", "pattern can never match";
    /// A capture used but not bound.
    E1306 = "E1306", "unbound capture";
    /// A pattern used with the wrong number of arguments.
    E1307 = "E1307", "pattern argument count mismatch";
    /// A dtype name that is not a dtype.
    E1308 = "E1308", "unknown dtype in rules";
    /// A predicate expression whose operand types do not fit.
    E1401 = "E1401", "predicate type error";
    /// A name or field that is not a value in a predicate.
    E1402 = "E1402", "invalid predicate expression";
    /// A field that the value does not have.
    E1403 = "E1403", "unknown field";
    /// A kind name that is not a kind.
    E1501 = "E1501", "unknown operator kind";
    /// A partition rule used wrongly (empty union, a non-call equivalence, ...).
    E1601 = "E1601", "ill-formed rule";
    /// A rule option that does not exist or has a bad value.
    E1602 = "E1602", "invalid rule option";
    /// A target without a field it needs.
    E1701 = "E1701", "missing target field";
    /// A field targets do not have.
    E1702 = "E1702", "unknown target field";
    /// A target field with a value of the wrong kind.
    E1703 = "E1703", "invalid target field value";
    /// A device that is not valid.
    E1704 = "E1704", "invalid device";
    /// A `refines` that does not hold.
    E1705 = "E1705", "invalid refinement";
    /// A cost or transition parameter with a bad value or unit.
    E1706 = "E1706", "invalid cost parameter";
    /// A target field given twice.
    E1707 = "E1707", "duplicate target field";
    /// Target fields that exclude each other.
    E1708 = "E1708", "conflicting target fields";
    /// A custom operator that clashes with a registered one.
    E1801 = "E1801", "conflicting operator declaration";

    /// An operator call that no target's candidates cover (with a usable cost).
    E2101 = "E2101", "operator not covered by any target";
    /// Candidates cover every node, but no combination of disjoint ones covers them all.
    E2102 = "E2102", "no partitioning covers the function";
    /// Rewriting the partitioned function failed or changed its meaning (a bug in collage).
    E2103 = "E2103", "partitioning produced an invalid program";
    /// A `--costs` specification, or a file it names, that cannot be used.
    E2104 = "E2104", "invalid cost specification";
    /// An `--explain` binding that names no node.
    E2105 = "E2105", "unknown binding to explain";
    /// Rules without a host target (or without any target) given to `collage partition`.
    E2106 = "E2106", "no host target";
    /// A target that the analytic estimator is asked to price but has no cost block.
    W2107 = "W2107", "target without analytic costs";

    /// The e-graph outgrew `--max-enodes` while equivalences were applied.
    E2201 = "E2201", "e-graph node limit reached";
    /// The equivalences did not saturate within `--max-egraph-iters` rounds.
    E2202 = "E2202", "e-graph iteration limit reached";
    /// A target's rules produced more candidates than `--max-candidates` (or needed more work).
    E2203 = "E2203", "candidate limit reached";
    /// A default depth limit was halved because a target's candidates outgrew the limits at it.
    W2205 = "W2205", "depth limit lowered";

    /// An operator, attribute value or dtype the reference interpreter cannot run.
    E2301 = "E2301", "operator not supported by the interpreter";
    /// A construct of the program that cannot be executed (dynamic shapes, recursion, function
    /// values, closures).
    E2302 = "E2302", "construct not supported for execution";
    /// A failure while running (an integer division by zero, an index out of range).
    E2303 = "E2303", "execution failed";
    /// An input tensor of the wrong shape or dtype, an unreadable `.npy` file or non-finite data.
    E2304 = "E2304", "invalid input tensor";
    /// An `--input` that names no parameter of `@main`, or names one twice.
    E2305 = "E2305", "unknown input";
    /// Outputs of two models that differ beyond the tolerance.
    E2306 = "E2306", "outputs differ";
    /// Two models that cannot be compared (different parameters or results).
    E2307 = "E2307", "models not comparable";
    /// A partition for a CPU library (`Compiler="dnnl"`, `"openblas"`) on a machine without it.
    E2308 = "E2308", "backend library missing";
    /// An `--input` that is not of the form `NAME=FILE.npy`.
    E2309 = "E2309", "malformed input specification";
    /// A backend could not run a unit; another backend runs it (a warning).
    W2310 = "W2310", "backend fell back";

    /// The model's constants, inputs and intermediate peak do not fit the memory limit.
    E2330 = "E2330", "not enough memory for the model";
    /// An output with NaN or infinite values (a warning).
    W2331 = "W2331", "non-finite output values";

    /// The measurement cache cannot be opened or created (or there is no cache directory).
    E2401 = "E2401", "cannot use the measurement cache";
    /// A damaged measurement cache was moved aside and rebuilt empty.
    W2402 = "W2402", "measurement cache rebuilt";
    /// The measurement cache failed while measuring; measuring went on without it.
    W2403 = "W2403", "measurement cache failed";
    /// A plan run by `collage bench` gives outputs that differ from the reference interpreter's.
    E2404 = "E2404", "benchmarked outputs differ";
    /// `collage cache clear` could not remove what the cache holds.
    E2405 = "E2405", "cannot clear the cache";
    /// `--raise-priority` could not raise the scheduling weight (a warning).
    W2406 = "W2406", "cannot raise the priority";
    /// `--cold-candidates` on a processor whose caches collage cannot evict (a warning).
    W2407 = "W2407", "cannot time candidates cold";
    /// The cache directory is not the user's own or others can write to it: refused.
    E2410 = "E2410", "cache directory refused";
    /// The cache directory cannot be used; a temporary one replaces it (a warning).
    W2411 = "W2411", "cache directory unusable";
    /// `collage cache clear` left files collage did not write, or that a running collage
    /// uses (a warning).
    W2412 = "W2412", "cache clear left files";

    /// `collage bench --onnxruntime always` on a model that is not an ONNX file.
    E2420 = "E2420", "ONNX Runtime needs an ONNX model";
    /// `collage bench --onnxruntime always`: ONNX Runtime's placement could not run.
    E2421 = "E2421", "ONNX Runtime placement failed";
    /// ONNX Runtime's placement in `collage bench` is skipped (a warning).
    W2422 = "W2422", "ONNX Runtime skipped";

    /// `collage bench --processes`: a value out of range, or with `--plot`.
    E2430 = "E2430", "bench processes refused";
    /// `collage bench --processes`: a process could not run, or ended without a report.
    E2431 = "E2431", "bench process failed";

    /// ONNX Runtime was asked for on a machine without it (not found, or refused).
    E2440 = "E2440", "ONNX Runtime not available";
    /// ONNX Runtime could not open a model (its message in the note).
    E2441 = "E2441", "ONNX Runtime cannot open the model";
    /// ONNX Runtime failed while running a model (its message in the note).
    E2442 = "E2442", "ONNX Runtime run failed";
    /// Inputs for ONNX Runtime that do not fit the model (name, dtype, shape, missing, twice).
    E2443 = "E2443", "invalid ONNX Runtime input";
    /// An output of ONNX Runtime that is not a tensor of a supported dtype.
    E2444 = "E2444", "unsupported ONNX Runtime output";

    /// Bytes that do not decode as an ONNX model (truncated, garbage, or not a protobuf).
    E3001 = "E3001", "malformed onnx file";
    /// An IR version below 3 (or none): models without operator set imports.
    E3002 = "E3002", "unsupported onnx ir version";
    /// A model without a graph or without an import of the default operator set.
    E3003 = "E3003", "incomplete onnx model";
    /// A node of a domain other than the default ONNX one (`ai.onnx`).
    E3004 = "E3004", "unsupported operator domain";
    /// `If`, `Loop`, `Scan` or an attribute holding a graph: control flow is out of scope.
    E3005 = "E3005", "control flow is out of scope";
    /// A training operator (`ai.onnx.training`, `ai.onnx.preview.training`, `Gradient`, ...).
    E3006 = "E3006", "training operators are out of scope";
    /// Two producers (inputs, weights, node outputs) of one value name.
    E3007 = "E3007", "duplicate value name";
    /// A value used by a node or listed as a graph output with no producer.
    E3008 = "E3008", "undefined value";
    /// The nodes' dependencies form a cycle.
    E3009 = "E3009", "graph has a cycle";
    /// A data type collage does not take (strings, complex, 8- and 4-bit floats, 4-bit ints).
    E3010 = "E3010", "unsupported data type";
    /// A negative dimension, or dimensions whose element count overflows or exceeds the limit.
    E3011 = "E3011", "invalid tensor shape";
    /// Tensor data whose size disagrees with its data type and shape.
    E3012 = "E3012", "tensor data do not match the shape";
    /// An external data location that is absolute or leads out of the model's folder.
    E3013 = "E3013", "external data location refused";
    /// An external data offset or length past the end of its file.
    E3014 = "E3014", "external data out of range";
    /// An external data file that cannot be opened or mapped, or a malformed entry.
    E3015 = "E3015", "cannot read external data";
    /// A node or attribute that breaks the format's rules (a `Constant` without a value, ...).
    E3016 = "E3016", "malformed node";
    /// Sparse initializers and sparse constants are not supported.
    E3017 = "E3017", "sparse tensors are not supported";
    /// An input shape or dimension binding that is not `name=1x3x224x224` or `symbol=8`.
    E3018 = "E3018", "malformed shape binding";
    /// A binding for an input that does not exist, of the wrong rank, or against a fixed size.
    E3019 = "E3019", "shape binding does not fit";
    /// Input dimensions left without a size.
    E3020 = "E3020", "unbound input dimensions";
    /// A shape computation on known values that has no result (an index out of range, a
    /// division by zero, a reshape of the wrong size, ...).
    E3021 = "E3021", "cannot fold a shape computation";
    /// An operator collage does not import (or a graph without outputs).
    E3022 = "E3022", "unsupported onnx operator";
    /// An operator used with an attribute value or input collage cannot express.
    E3023 = "E3023", "unsupported operator usage";
    /// An operator whose inputs do not have the types it needs.
    E3024 = "E3024", "onnx operator does not type";
    /// An input that must be known when the model is imported depends on the inputs' values.
    E3025 = "E3025", "value not known at import time";
    /// Nodes listed out of topological order; they are sorted (a warning).
    W3051 = "W3051", "nodes not in topological order";
    /// An IR version newer than collage knows; the model is read as the newest known (a warning).
    W3052 = "W3052", "newer onnx ir version";
    /// A dimension binding for a symbol that no input has (a warning).
    W3053 = "W3053", "unused dimension binding";
    /// A shape computation whose result would exceed the folding limit is left unfolded (a
    /// warning).
    W3054 = "W3054", "shape computation left unfolded";
    /// Graph simplification failed on a model (an internal error); the model is used as given
    /// (a warning).
    W3100 = "W3100", "simplification failed";
    /// `Session.run` without a value for one of the model's inputs.
    E3900 = "E3900", "missing input";
    /// An output whose element type NumPy has no type for (`bfloat16`).
    E3901 = "E3901", "output type without a numpy dtype";
}

#[cfg(test)]
mod tests {
    use super::ALL_CODES;

    #[test]
    fn codes_are_listed_in_numeric_order_once() {
        let numbers: Vec<u32> = ALL_CODES
            .iter()
            .map(|c| c.id[1..].parse().unwrap())
            .collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    }
}
