//! Types: `Tensor[(d0, ...), dtype]`, scalar dtypes, tuples, `fn (...) -> T`, `_`.

use super::{PResult, Parser};
use crate::diag::*;
use crate::frontend::relay::lexer::Tok;
use crate::frontend::relay::number::{parse_number, Number};
use crate::ir::*;

impl<'s> Parser<'s> {
    /// A type.
    pub(crate) fn ty(&mut self) -> PResult<Type> {
        self.enter()?;
        let t = self.tok();
        let result = match t.kind {
            Tok::LParen => {
                self.bump();
                let mut fields = Vec::new();
                while self.peek() != Tok::RParen {
                    fields.push(self.ty()?);
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RParen, "`,` or `)` in the tuple type")?;
                Type::Tuple(fields)
            }
            Tok::Fn => {
                self.bump();
                if self.peek() == Tok::LBracket {
                    return Err(self.unsupported("generic function types"));
                }
                self.expect(Tok::LParen, "`(` after `fn` in a function type")?;
                let mut params = Vec::new();
                while self.peek() != Tok::RParen {
                    params.push(self.ty()?);
                    if !self.eat(Tok::Comma) {
                        break;
                    }
                }
                self.expect(Tok::RParen, "`,` or `)` in the function type")?;
                if !self.eat(Tok::Arrow) {
                    return Err(self.unexpected("`->` and the result type"));
                }
                let ret = self.ty()?;
                Type::Func(FuncType {
                    params,
                    ret: Box::new(ret),
                })
            }
            Tok::Underscore => {
                self.bump();
                Type::Incomplete
            }
            Tok::Ident if self.text(t) == "Tensor" => {
                self.bump();
                self.expect(Tok::LBracket, "`[` after `Tensor`")?;
                let shape = self.shape()?;
                self.expect(Tok::Comma, "`,` between the shape and the dtype")?;
                let dtype = self.dtype()?;
                self.expect(Tok::RBracket, "`]` to close the tensor type")?;
                Type::Tensor(TensorType { shape, dtype })
            }
            Tok::Ident => Type::Tensor(TensorType::scalar(self.dtype()?)),
            _ => return Err(self.unexpected("a type")),
        };
        self.leave();
        Ok(result)
    }

    fn dtype(&mut self) -> PResult<DType> {
        let t = self.expect(Tok::Ident, "a dtype such as `float32`")?;
        let name = self.text(t);
        if let Some(d) = DType::parse(name) {
            return Ok(d);
        }
        let looks_like_dtype = ["int", "uint", "float", "bfloat", "bool"]
            .iter()
            .any(|p| name.starts_with(p));
        let d = if looks_like_dtype {
            Diagnostic::error(E0502, format!("unknown dtype `{name}`"))
                .with_primary(self.span(t), "not a valid dtype")
                .with_note("dtypes are written like `float32`, `float16`, `int64`, `uint8`, `bool` or `int8x4`")
        } else {
            Diagnostic::error(E0509, format!("unsupported type `{name}`")).with_primary(
                self.span(t),
                "type variables and ADT types are not supported",
            )
        };
        Err(self.fatal(d))
    }

    fn shape(&mut self) -> PResult<Vec<Dim>> {
        self.expect(Tok::LParen, "`(` to start the shape")?;
        let mut dims = Vec::new();
        while self.peek() != Tok::RParen {
            let t = self.tok();
            let dim = match t.kind {
                Tok::Question => {
                    self.bump();
                    Dim::Any
                }
                Tok::Meta => {
                    self.bump();
                    Dim::Sym(self.text(t).to_string())
                }
                Tok::Number => {
                    self.bump();
                    match parse_number(self.text(t)) {
                        Ok(Number::Int(v, _)) if v >= 0 => Dim::Fixed(v),
                        Ok(_) => {
                            let d = Diagnostic::error(
                                E0201,
                                format!("invalid dimension `{}`", self.text(t)),
                            )
                            .with_primary(
                                self.span(t),
                                "dimensions are non-negative integers, `?` or a meta reference",
                            );
                            return Err(self.fatal(d));
                        }
                        Err(e) => return Err(self.number_error(e, self.span(t))),
                    }
                }
                _ => {
                    return Err(self.unexpected("a dimension (an integer, `?` or a meta reference)"))
                }
            };
            dims.push(dim);
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RParen, "`,` or `)` in the shape")?;
        Ok(dims)
    }
}
