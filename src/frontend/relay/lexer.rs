//! The RelayScript lexer (logos).
//!
//! Produces a vector of [`Token`]s with byte spans. Whitespace and comments are dropped, with one
//! exception: a `/* ty=T */` comment that directly follows a `meta[...]` reference is recorded in
//! [`Lexed::type_comments`], because that is how constants without a metadata section get their
//! type. A `#[metadata]` header ends the token stream; the text after it is returned separately.

use logos::{Lexer, Logos};

/// Why a piece of text is not a token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LexError {
    /// A character that starts no token.
    #[default]
    InvalidChar,
    /// `/*` without a matching `*/`.
    UnterminatedComment,
    /// `meta[` not followed by `key][index]`.
    MalformedMeta,
}

/// Token kinds. Each variant's doc shows an example.
#[derive(Logos, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
pub enum Tok {
    /// `/* ... */`, possibly nested; only kept when it follows a meta reference.
    #[token("/*", block_comment)]
    BlockComment,
    /// `%12`
    #[regex(r"%[0-9]+")]
    Graph,
    /// `%x`, `%FunctionVar_0`, `%base/x`
    #[regex(r"%[A-Za-z_][A-Za-z0-9_/]*")]
    Local,
    /// `@main`
    #[regex(r"@[A-Za-z_][A-Za-z0-9_/]*")]
    Global,
    /// `nn`, `Tensor`, `float32`, `None`, attribute keys
    #[regex(r"[A-Za-z_][A-Za-z0-9_/]*")]
    Ident,
    /// `let`
    #[token("let")]
    Let,
    /// `fn`
    #[token("fn")]
    Fn,
    /// `def`
    #[token("def")]
    Def,
    /// `if`
    #[token("if")]
    If,
    /// `else`
    #[token("else")]
    Else,
    /// `type`
    #[token("type")]
    Type,
    /// `match` (unsupported)
    #[token("match")]
    #[token("match?")]
    Match,
    /// `extern` (unsupported)
    #[token("extern")]
    Extern,
    /// `free_var`
    #[token("free_var")]
    FreeVar,
    /// `ref`, `ref_read`, `ref_write` (unsupported)
    #[token("ref")]
    #[token("ref_read")]
    #[token("ref_write")]
    Ref,
    /// `True`
    #[token("True")]
    True,
    /// `False`
    #[token("False")]
    False,
    /// `_`
    #[token("_", priority = 5)]
    Underscore,
    /// `0`, `-1`, `1e-05f`, `2f16`, `50257i64`; validated by the parser
    #[regex(r"-*[0-9][0-9.eE+\-]*([fi][0-9.eE+\-]*)?")]
    #[regex(r"-*(inff|nanf)[0-9]*", priority = 10)]
    Number,
    /// `"NCHW"`, with C-style escapes
    #[regex(r#""([^"\\]|\\[\s\S])*""#)]
    Str,
    /// a string that runs to the end of the input
    #[regex(r#""([^"\\]|\\[\s\S])*\\?"#, priority = 1)]
    UnterminatedStr,
    /// `meta[relay.Constant][0]`
    #[token("meta[", meta_ref)]
    Meta,
    /// `#[version = "0.0.5"]` or any other `#[...]` header except metadata
    #[regex(r"#\[[^\]\n]*\]?")]
    Hash,
    /// `#[metadata]`; the rest of the input is its JSON
    #[regex(r"#\[[ \t]*metadata[ \t]*\]", priority = 20)]
    Metadata,
    /// `(`
    #[token("(")]
    LParen,
    /// `)`
    #[token(")")]
    RParen,
    /// `[`
    #[token("[")]
    LBracket,
    /// `]`
    #[token("]")]
    RBracket,
    /// `{`
    #[token("{")]
    LBrace,
    /// `}`
    #[token("}")]
    RBrace,
    /// `,`
    #[token(",")]
    Comma,
    /// `.`
    #[token(".")]
    Dot,
    /// `;`
    #[token(";")]
    Semi,
    /// `:`
    #[token(":")]
    Colon,
    /// `=`
    #[token("=")]
    Eq,
    /// `==`
    #[token("==")]
    EqEq,
    /// `!=`
    #[token("!=")]
    NotEq,
    /// `<`
    #[token("<")]
    Lt,
    /// `<=`
    #[token("<=")]
    Le,
    /// `>`
    #[token(">")]
    Gt,
    /// `>=`
    #[token(">=")]
    Ge,
    /// `->`
    #[token("->")]
    Arrow,
    /// `=>`
    #[token("=>")]
    FatArrow,
    /// `+`
    #[token("+")]
    Plus,
    /// `-`
    #[token("-")]
    Minus,
    /// `*`
    #[token("*")]
    Star,
    /// `/`
    #[token("/")]
    Slash,
    /// `?`
    #[token("?")]
    Question,
    /// `!`
    #[token("!")]
    Bang,
    /// End of input (never produced by logos; appended by [`lex`]).
    Eof,
}

fn block_comment(lex: &mut Lexer<Tok>) -> Result<(), LexError> {
    let rest = lex.remainder().as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < rest.len() {
        match rest[i] {
            b'*' if rest.get(i + 1) == Some(&b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    lex.bump(i);
                    return Ok(());
                }
            }
            b'/' if rest.get(i + 1) == Some(&b'*') => {
                depth += 1;
                i += 2;
            }
            _ => i += 1,
        }
    }
    lex.bump(rest.len());
    Err(LexError::UnterminatedComment)
}

fn meta_ref(lex: &mut Lexer<Tok>) -> Result<(), LexError> {
    let rest = lex.remainder().as_bytes();
    // On error, cover the malformed reference up to the next space or line end.
    let malformed = |lex: &mut Lexer<Tok>| {
        let n = rest
            .iter()
            .take(256)
            .take_while(|&&b| !b.is_ascii_whitespace() && b != b',' && b != b')' && b != b';')
            .count();
        lex.bump(n);
        LexError::MalformedMeta
    };
    let Some(key_len) = rest
        .iter()
        .position(|&b| b == b']' || b == b'\n' || b == b' ')
    else {
        return Err(malformed(lex));
    };
    if key_len == 0 || rest[key_len] != b']' || rest.get(key_len + 1) != Some(&b'[') {
        return Err(malformed(lex));
    }
    let digits = rest[key_len + 2..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || rest.get(key_len + 2 + digits) != Some(&b']') {
        return Err(malformed(lex));
    }
    lex.bump(key_len + 3 + digits);
    Ok(())
}

/// One token: its kind and byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// The kind.
    pub kind: Tok,
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

/// A lexing problem and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexProblem {
    /// What is wrong.
    pub error: LexError,
    /// First byte of the offending text.
    pub start: u32,
    /// One past its last byte.
    pub end: u32,
}

/// The result of lexing a whole file.
#[derive(Clone, Debug, Default)]
pub struct Lexed {
    /// Tokens, ending with [`Tok::Eof`].
    pub tokens: Vec<Token>,
    /// `(index of a Meta token, start, end of the comment)` for each `/* ty=... */` that directly
    /// follows a meta reference.
    pub type_comments: Vec<(u32, u32, u32)>,
    /// Byte offset of the metadata JSON (just after `#[metadata]`), if the file has a section.
    pub metadata: Option<(u32, u32)>,
    /// The first lexing problem, if any (lexing stops there).
    pub problem: Option<LexProblem>,
}

/// Lexes a whole file. Stops at the first problem or at `#[metadata]`.
pub fn lex(src: &str) -> Lexed {
    let mut out = Lexed {
        tokens: Vec::with_capacity(src.len() / 4 + 1),
        ..Lexed::default()
    };
    let mut lexer = Tok::lexer(src);
    while let Some(res) = lexer.next() {
        let span = lexer.span();
        let (start, end) = (span.start as u32, span.end as u32);
        match res {
            Ok(Tok::BlockComment) => {
                if let Some(last) = out.tokens.last() {
                    if last.kind == Tok::Meta && is_type_comment(&src[span.clone()]) {
                        let idx = (out.tokens.len() - 1) as u32;
                        out.type_comments.push((idx, start, end));
                    }
                }
            }
            Ok(Tok::Metadata) => {
                out.metadata = Some((end, src.len() as u32));
                break;
            }
            Ok(kind) => out.tokens.push(Token { kind, start, end }),
            Err(error) => {
                let end = if error == LexError::InvalidChar {
                    start + src[span.start..].chars().next().map_or(1, char::len_utf8) as u32
                } else {
                    end
                };
                out.problem = Some(LexProblem { error, start, end });
                break;
            }
        }
    }
    let eof = out
        .metadata
        .map_or(src.len() as u32, |(s, _)| s)
        .min(src.len() as u32);
    let eof = out.problem.map_or(eof, |p| p.start);
    out.tokens.push(Token {
        kind: Tok::Eof,
        start: eof,
        end: eof,
    });
    out
}

fn is_type_comment(comment: &str) -> bool {
    comment
        .strip_prefix("/*")
        .map(|s| s.trim_start().starts_with("ty="))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        let l = lex(src);
        assert_eq!(l.problem, None, "{src}");
        l.tokens.iter().map(|t| t.kind).collect()
    }

    #[test]
    fn names_and_keywords() {
        use Tok::*;
        assert_eq!(
            kinds("%0 %x @main nn.conv2d let fn letter True _ %_ %True"),
            [
                Graph, Local, Global, Ident, Dot, Ident, Let, Fn, Ident, True, Underscore, Local,
                Local, Eof
            ]
        );
        assert_eq!(kinds("%base/x"), [Local, Eof]);
        assert_eq!(kinds("%0abc"), [Graph, Ident, Eof]);
    }

    #[test]
    fn numbers_with_suffixes_and_signs() {
        let src = "0f 1e-05f 2f16 50257i64 -1 --10 0.044715f16 inff -inff 2-1";
        let l = lex(src);
        let texts: Vec<_> = l.tokens[..l.tokens.len() - 1]
            .iter()
            .map(|t| &src[t.start as usize..t.end as usize])
            .collect();
        assert_eq!(
            texts,
            [
                "0f",
                "1e-05f",
                "2f16",
                "50257i64",
                "-1",
                "--10",
                "0.044715f16",
                "inff",
                "-inff",
                "2-1"
            ]
        );
        assert!(l
            .tokens
            .iter()
            .all(|t| matches!(t.kind, Tok::Number | Tok::Eof)));
    }

    #[test]
    fn minus_only_folds_into_an_adjacent_digit() {
        use Tok::*;
        assert_eq!(kinds("%a - 1"), [Local, Minus, Number, Eof]);
        assert_eq!(kinds("%a-%b"), [Local, Minus, Local, Eof]);
        assert_eq!(kinds("-> - >"), [Arrow, Minus, Gt, Eof]);
    }

    #[test]
    fn nested_comments_and_type_comments() {
        let src =
            "a /* x /* y */ z */ meta[relay.Constant][3] /* ty=Tensor[(2), float32] */ b // c\n d";
        let l = lex(src);
        let kinds: Vec<_> = l.tokens.iter().map(|t| t.kind).collect();
        assert_eq!(
            kinds,
            [Tok::Ident, Tok::Meta, Tok::Ident, Tok::Ident, Tok::Eof]
        );
        assert_eq!(l.type_comments.len(), 1);
        let (idx, s, e) = l.type_comments[0];
        assert_eq!(idx, 1);
        assert_eq!(
            &src[s as usize..e as usize],
            "/* ty=Tensor[(2), float32] */"
        );
    }

    #[test]
    fn strings_with_escapes() {
        let src = r#""a\"b" "c\\" "#;
        assert_eq!(kinds(src), [Tok::Str, Tok::Str, Tok::Eof]);
        assert_eq!(kinds(r#""unterminated"#), [Tok::UnterminatedStr, Tok::Eof]);
    }

    #[test]
    fn metadata_swallows_the_rest() {
        let src = "def @f() { 1 }\n#[metadata]\n{\"root\": 1}";
        let l = lex(src);
        let (s, e) = l.metadata.unwrap();
        assert_eq!(&src[s as usize..e as usize], "\n{\"root\": 1}");
        assert_eq!(l.tokens.last().unwrap().kind, Tok::Eof);
    }

    #[test]
    fn problems_stop_lexing() {
        assert_eq!(lex("a $ b").problem.unwrap().error, LexError::InvalidChar);
        assert_eq!(
            lex("a /* b").problem.unwrap().error,
            LexError::UnterminatedComment
        );
        assert_eq!(
            lex("meta[x]").problem.unwrap().error,
            LexError::MalformedMeta
        );
        assert_eq!(lex("é").problem.unwrap().end, 2);
    }

    #[test]
    fn version_header() {
        let l = lex("#[version = \"0.0.5\"]\ndef");
        assert_eq!(l.tokens[0].kind, Tok::Hash);
        assert_eq!(l.tokens[1].kind, Tok::Def);
    }
}
