//! The stable diagnostic codes. Every code here is documented in `docs/diagnostics.md` (a test
//! checks this); codes are never reused for a different meaning.
//!
//! Ranges: `E01xx` lexical, `E02xx` syntax, `E03xx` names, `E04xx` calls and attributes,
//! `E05xx` types, `E06xx` meta references and the metadata section, `E09xx` files and I/O.

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

    /// A file that cannot be read.
    E0901 = "E0901", "cannot read file";
    /// An output file that cannot be written.
    E0902 = "E0902", "cannot write file";
}
