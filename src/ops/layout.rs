//! Data layouts such as `NCHW`, `NHWC`, `OIHW` or the blocked `NCHW16c`, and conversion of shapes
//! between two layouts with the same axes (TVM's `BijectiveLayout`).
//!
//! A layout is a sequence of axes. An uppercase letter is a primal axis; a lowercase letter
//! preceded by a factor (`16c`) is a sub-axis that splits the primal axis of the same letter, so
//! the primal extent of `C` in `NCHW16c` is `shape[1] * 16`.

use crate::ir::Dim;
use std::fmt;

/// One axis of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutAxis {
    /// The axis letter, uppercase (`c` in `16c` is stored as `C`).
    pub name: char,
    /// The split factor for a sub-axis, `None` for a primal axis.
    pub factor: Option<i64>,
}

/// A parsed layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    text: String,
    axes: Vec<LayoutAxis>,
}

impl Layout {
    /// Parses a layout string. Errors are lowercase descriptions of what is wrong.
    pub fn parse(s: &str) -> Result<Layout, String> {
        if s.is_empty() {
            return Err("a layout cannot be empty".into());
        }
        let mut axes: Vec<LayoutAxis> = Vec::new();
        let mut factor: Option<i64> = None;
        for ch in s.chars() {
            if let Some(digit) = ch.to_digit(10) {
                let f = factor
                    .unwrap_or(0)
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(i64::from(digit)))
                    .ok_or_else(|| format!("a split factor in layout `{s}` is too large"))?;
                factor = Some(f);
            } else if ch.is_ascii_uppercase() {
                if factor.is_some() {
                    return Err(format!(
                        "layout `{s}` puts a factor before the primal axis `{ch}`"
                    ));
                }
                if axes.iter().any(|a| a.name == ch && a.factor.is_none()) {
                    return Err(format!("layout `{s}` repeats the axis `{ch}`"));
                }
                axes.push(LayoutAxis {
                    name: ch,
                    factor: None,
                });
            } else if ch.is_ascii_lowercase() {
                let name = ch.to_ascii_uppercase();
                let f = match factor.take() {
                    Some(f) if f > 0 => f,
                    _ => {
                        return Err(format!(
                        "sub-axis `{ch}` of layout `{s}` needs a positive factor such as `16{ch}`"
                    ))
                    }
                };
                if axes.iter().any(|a| a.name == name && a.factor.is_some()) {
                    return Err(format!("layout `{s}` splits the axis `{name}` twice"));
                }
                axes.push(LayoutAxis {
                    name,
                    factor: Some(f),
                });
            } else {
                return Err(format!("unexpected character `{ch}` in layout `{s}`"));
            }
        }
        if factor.is_some() {
            return Err(format!("layout `{s}` ends with a dangling factor"));
        }
        for a in &axes {
            if a.factor.is_some() && !axes.iter().any(|p| p.name == a.name && p.factor.is_none()) {
                return Err(format!(
                    "layout `{s}` has the sub-axis `{}` without its primal axis `{}`",
                    a.name.to_ascii_lowercase(),
                    a.name
                ));
            }
        }
        Ok(Layout {
            text: s.to_string(),
            axes,
        })
    }

    /// The layout as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Number of axes (the rank of tensors in this layout).
    pub fn rank(&self) -> usize {
        self.axes.len()
    }

    /// The axes in order.
    pub fn axes(&self) -> &[LayoutAxis] {
        &self.axes
    }

    /// Position of the primal axis `name` (uppercase).
    pub fn position(&self, name: char) -> Option<usize> {
        self.axes
            .iter()
            .position(|a| a.name == name && a.factor.is_none())
    }

    /// The split factor of primal axis `name`, if the layout splits it.
    pub fn split_factor(&self, name: char) -> Option<i64> {
        self.axes
            .iter()
            .find(|a| a.name == name && a.factor.is_some())
            .and_then(|a| a.factor)
    }

    /// Position of primal axis `name`, which must be present and unsplit (pooling, resizing and
    /// similar operators work on whole axes only).
    pub fn unsplit_position(&self, name: char) -> Result<usize, String> {
        let pos = self
            .position(name)
            .ok_or_else(|| format!("layout `{}` has no `{name}` axis", self.text))?;
        if self.split_factor(name).is_some() {
            return Err(format!(
                "layout `{}` splits the `{name}` axis, which this operator does not support",
                self.text
            ));
        }
        Ok(pos)
    }

    fn primal_names(&self) -> Vec<char> {
        let mut names: Vec<char> = self
            .axes
            .iter()
            .filter(|a| a.factor.is_none())
            .map(|a| a.name)
            .collect();
        names.sort_unstable();
        names
    }

    /// Converts a shape written in this layout to the layout `dst`, which must have the same
    /// primal axes. Splits must divide static extents; dynamic extents stay dynamic.
    pub fn convert(&self, shape: &[Dim], dst: &Layout) -> Result<Vec<Dim>, String> {
        if shape.len() != self.rank() {
            return Err(format!(
                "layout `{}` needs a rank-{} tensor, found rank {}",
                self.text,
                self.rank(),
                shape.len()
            ));
        }
        if self.primal_names() != dst.primal_names() {
            return Err(format!(
                "layouts `{}` and `{}` do not have the same axes",
                self.text, dst.text
            ));
        }
        if self == dst {
            return Ok(shape.to_vec());
        }
        // The full extent of every primal axis.
        let mut full: Vec<(char, Dim)> = Vec::with_capacity(self.rank());
        for (i, a) in self.axes.iter().enumerate() {
            match a.factor {
                None => {
                    let d = &shape[i];
                    let total = match (self.split_factor(a.name), d) {
                        (None, d) => d.clone(),
                        (Some(f), Dim::Fixed(n)) => Dim::Fixed(
                            n.checked_mul(f)
                                .ok_or_else(|| format!("extent of axis `{}` overflows", a.name))?,
                        ),
                        (Some(_), _) => Dim::Any,
                    };
                    full.push((a.name, total));
                }
                Some(f) => {
                    if let Dim::Fixed(n) = shape[i] {
                        if n != f {
                            return Err(format!(
                                "sub-axis `{}{}` of layout `{}` has extent {n}",
                                f,
                                a.name.to_ascii_lowercase(),
                                self.text
                            ));
                        }
                    }
                }
            }
        }
        let extent_of = |name: char| -> Dim {
            full.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, d)| d.clone())
                .unwrap_or(Dim::Any)
        };
        let mut out = Vec::with_capacity(dst.rank());
        for a in &dst.axes {
            match a.factor {
                Some(f) => out.push(Dim::Fixed(f)),
                None => {
                    let total = extent_of(a.name);
                    out.push(match (dst.split_factor(a.name), total) {
                        (None, d) => d,
                        (Some(f), Dim::Fixed(n)) => {
                            if n % f != 0 {
                                return Err(format!(
                                    "extent {n} of axis `{}` is not divisible by the factor {f} of layout `{}`",
                                    a.name, dst.text
                                ));
                            }
                            Dim::Fixed(n / f)
                        }
                        (Some(_), _) => Dim::Any,
                    });
                }
            }
        }
        Ok(out)
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(v: &[i64]) -> Vec<Dim> {
        v.iter().map(|&n| Dim::Fixed(n)).collect()
    }

    fn l(s: &str) -> Layout {
        Layout::parse(s).unwrap()
    }

    #[test]
    fn parses_plain_and_blocked_layouts() {
        assert_eq!(l("NCHW").rank(), 4);
        let b = l("NCHW16c");
        assert_eq!(b.rank(), 5);
        assert_eq!(b.split_factor('C'), Some(16));
        assert_eq!(b.position('W'), Some(3));
        assert!(b.unsplit_position('C').is_err());
        for bad in [
            "", "NCHWc", "NCHW16", "NCCHW", "NHW16c", "N-CHW", "16NCHW", "NC4c4cHW",
        ] {
            assert!(Layout::parse(bad).is_err(), "{bad}");
        }
        assert!(Layout::parse("NCHW99999999999999999999c").is_err());
    }

    #[test]
    fn converts_permutations_and_blocks() {
        let s = dims(&[1, 224, 224, 3]);
        assert_eq!(
            l("NHWC").convert(&s, &l("NCHW")).unwrap(),
            dims(&[1, 3, 224, 224])
        );
        let s = dims(&[1, 64, 56, 56]);
        let blocked = l("NCHW").convert(&s, &l("NCHW16c")).unwrap();
        assert_eq!(blocked, dims(&[1, 4, 56, 56, 16]));
        assert_eq!(
            l("NCHW16c").convert(&blocked, &l("NHWC")).unwrap(),
            dims(&[1, 56, 56, 64])
        );
        assert_eq!(
            l("NCHW16c").convert(&blocked, &l("NCHW8c")).unwrap(),
            dims(&[1, 8, 56, 56, 8])
        );
        let dynamic = vec![Dim::Any, Dim::Fixed(3), Dim::Fixed(8), Dim::Fixed(8)];
        assert_eq!(
            l("NCHW").convert(&dynamic, &l("NHWC")).unwrap(),
            vec![Dim::Any, Dim::Fixed(8), Dim::Fixed(8), Dim::Fixed(3)]
        );
    }

    #[test]
    fn conversion_errors() {
        let s = dims(&[1, 3, 8, 8]);
        assert!(l("NCHW")
            .convert(&s, &l("NCHW16c"))
            .unwrap_err()
            .contains("not divisible"));
        assert!(l("NCHW")
            .convert(&s, &l("NCDHW"))
            .unwrap_err()
            .contains("same axes"));
        assert!(l("NCHW")
            .convert(&s[..3], &l("NHWC"))
            .unwrap_err()
            .contains("rank-4"));
        let bad_block = dims(&[1, 4, 8, 8, 8]);
        assert!(l("NCHW16c").convert(&bad_block, &l("NCHW")).is_err());
        let huge = dims(&[1, i64::MAX, 1, 1, 16]);
        assert!(l("NCHW16c").convert(&huge, &l("NCHW")).is_err());
    }
}
