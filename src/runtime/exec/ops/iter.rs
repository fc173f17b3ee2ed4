//! Loops shared by the operator implementations: strided and broadcasting element maps, and
//! strided copies of any element type.
//!
//! Every loop visits the output in row-major order; the parallel versions split the output into
//! disjoint chunks of whole rows, so results do not depend on the number of threads.

use crate::runtime::exec::tensor::{numel, Tensor};
use rayon::prelude::*;

/// Outputs with fewer elements than this are computed on one thread.
pub const PAR_MIN: usize = 1 << 15;

/// Strides (in elements) of an input of shape `dims` broadcast to `out` (aligned at the last
/// axis; broadcast axes get stride 0).
pub fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let own = crate::runtime::exec::tensor::strides(dims);
    let mut s = vec![0usize; out.len()];
    let off = out.len() - dims.len();
    for (i, (&d, &st)) in dims.iter().zip(&own).enumerate() {
        if d != 1 {
            s[off + i] = st;
        }
    }
    s
}

/// Walks the rows (all axes but the last) of an output of shape `dims`, tracking one offset per
/// input from its strides.
struct Rows<'a> {
    dims: &'a [usize],
    strides: &'a [&'a [usize]],
    coord: Vec<usize>,
    offs: Vec<usize>,
}

impl<'a> Rows<'a> {
    /// Positioned at row `row` (rows are numbered in row-major order).
    fn at(dims: &'a [usize], strides: &'a [&'a [usize]], row: usize) -> Rows<'a> {
        let r = dims.len();
        let mut coord = vec![0usize; r.saturating_sub(1)];
        let mut rest = row;
        for i in (0..coord.len()).rev() {
            coord[i] = rest % dims[i];
            rest /= dims[i];
        }
        let offs = strides
            .iter()
            .map(|s| coord.iter().zip(s.iter()).map(|(c, st)| c * st).sum())
            .collect();
        Rows {
            dims,
            strides,
            coord,
            offs,
        }
    }

    fn advance(&mut self) {
        for i in (0..self.coord.len()).rev() {
            self.coord[i] += 1;
            for (o, s) in self.offs.iter_mut().zip(self.strides) {
                *o += s[i];
            }
            if self.coord[i] < self.dims[i] {
                return;
            }
            for (o, s) in self.offs.iter_mut().zip(self.strides) {
                *o -= s[i] * self.dims[i];
            }
            self.coord[i] = 0;
        }
    }
}

/// Calls `f(out_row, offsets, inner_strides)` for every row of an output of shape `dims`, where
/// `out_row` is the row's slice of `out` and `offsets[k]` the offset of input `k` at the row's
/// start. Rows are split across threads when the output is large.
pub fn for_rows<O: Send>(
    out: &mut [O],
    dims: &[usize],
    strides: &[&[usize]],
    f: impl Fn(&mut [O], &[usize], &[usize]) + Sync,
) {
    let total = out.len();
    if total == 0 {
        return;
    }
    let r = dims.len();
    let last = if r == 0 { 1 } else { dims[r - 1] };
    let inner: Vec<usize> = strides
        .iter()
        .map(|s| if r == 0 { 0 } else { s[r - 1] })
        .collect();
    let rows = total / last;
    let run = |chunk: &mut [O], first_row: usize| {
        let mut it = Rows::at(dims, strides, first_row);
        for row in chunk.chunks_mut(last) {
            f(row, &it.offs, &inner);
            it.advance();
        }
    };
    let threads = rayon::current_num_threads();
    if total < PAR_MIN || threads <= 1 || rows < 2 {
        run(out, 0);
    } else {
        let per = rows.div_ceil(threads * 4).max(1);
        out.par_chunks_mut(per * last)
            .enumerate()
            .for_each(|(i, chunk)| run(chunk, i * per));
    }
}

/// `out[i] = f(a[i])` over equal-length slices.
pub fn map1<A: Copy + Sync, O: Send>(a: &[A], out: &mut [O], f: impl Fn(A) -> O + Sync) {
    if out.len() < PAR_MIN || rayon::current_num_threads() <= 1 {
        for (o, &x) in out.iter_mut().zip(a) {
            *o = f(x);
        }
    } else {
        out.par_chunks_mut(PAR_MIN / 4)
            .zip(a.par_chunks(PAR_MIN / 4))
            .for_each(|(o, x)| {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = f(x);
                }
            });
    }
}

/// `out = f(a, b)` with broadcasting; `sa`/`sb` are the inputs' strides over the output shape.
#[allow(clippy::too_many_arguments)]
pub fn map2<A: Copy + Sync, B: Copy + Sync, O: Send>(
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &mut [O],
    dims: &[usize],
    f: impl Fn(A, B) -> O + Sync,
) {
    for_rows(out, dims, &[sa, sb], |row, offs, inner| {
        let (oa, ob, ia, ib) = (offs[0], offs[1], inner[0], inner[1]);
        if ia == 1 && ib == 1 {
            let (xa, xb) = (&a[oa..oa + row.len()], &b[ob..ob + row.len()]);
            for ((o, &x), &y) in row.iter_mut().zip(xa).zip(xb) {
                *o = f(x, y);
            }
        } else {
            for (j, o) in row.iter_mut().enumerate() {
                *o = f(a[oa + j * ia], b[ob + j * ib]);
            }
        }
    });
}

/// `out = f(a, b, c)` with broadcasting.
#[allow(clippy::too_many_arguments)]
pub fn map3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Send>(
    a: (&[A], &[usize]),
    b: (&[B], &[usize]),
    c: (&[C], &[usize]),
    out: &mut [O],
    dims: &[usize],
    f: impl Fn(A, B, C) -> O + Sync,
) {
    for_rows(out, dims, &[a.1, b.1, c.1], |row, offs, inner| {
        for (j, o) in row.iter_mut().enumerate() {
            *o = f(
                a.0[offs[0] + j * inner[0]],
                b.0[offs[1] + j * inner[1]],
                c.0[offs[2] + j * inner[2]],
            );
        }
    });
}

fn copy_typed<T: bytemuck::Pod + Send + Sync>(
    src: &[u8],
    base: usize,
    strides: &[usize],
    dst: &mut [u8],
    dims: &[usize],
) {
    let s: &[T] = bytemuck::cast_slice(src);
    let d: &mut [T] = bytemuck::cast_slice_mut(dst);
    for_rows(d, dims, &[strides], |row, offs, inner| {
        let o = base + offs[0];
        if inner[0] == 1 {
            row.copy_from_slice(&s[o..o + row.len()]);
        } else {
            for (j, x) in row.iter_mut().enumerate() {
                *x = s[o + j * inner[0]];
            }
        }
    });
}

/// Fills `dst` (row-major, shape `dims`) with `src[base + Σ coord[k] * strides[k]]`: the strided
/// copy behind transpose, broadcasting, slicing and layout changes, for any element type.
pub fn strided_copy(src: &Tensor, base: usize, strides: &[usize], dst: &mut Tensor) {
    debug_assert_eq!(numel(dst.shape()), Some(dst.numel()));
    let dims = dst.shape().to_vec();
    let es = src.elem_size();
    let s = src.bytes();
    let d = dst.bytes_mut();
    match es {
        1 => copy_typed::<u8>(s, base, strides, d, &dims),
        2 => copy_typed::<u16>(s, base, strides, d, &dims),
        4 => copy_typed::<u32>(s, base, strides, d, &dims),
        _ => copy_typed::<u64>(s, base, strides, d, &dims),
    }
}

fn gather_signed_typed<T: bytemuck::Pod + Send + Sync>(
    src: &[u8],
    base: usize,
    strides: &[isize],
    dst: &mut [u8],
    dims: &[usize],
) {
    let s: &[T] = bytemuck::cast_slice(src);
    let d: &mut [T] = bytemuck::cast_slice_mut(dst);
    let r = dims.len();
    if d.is_empty() {
        return;
    }
    if r == 0 {
        d[0] = s[base];
        return;
    }
    let last = dims[r - 1];
    let inner = strides[r - 1];
    let rows = d.len() / last;
    let run = |chunk: &mut [T], first_row: usize| {
        let mut coord = vec![0usize; r - 1];
        let mut rest = first_row;
        for i in (0..r - 1).rev() {
            coord[i] = rest % dims[i];
            rest /= dims[i];
        }
        let mut off = base as isize
            + coord
                .iter()
                .zip(strides)
                .map(|(&c, &st)| c as isize * st)
                .sum::<isize>();
        for row in chunk.chunks_mut(last) {
            let mut o = off;
            for x in row.iter_mut() {
                *x = s[o as usize];
                o += inner;
            }
            for i in (0..r - 1).rev() {
                coord[i] += 1;
                off += strides[i];
                if coord[i] < dims[i] {
                    break;
                }
                off -= strides[i] * dims[i] as isize;
                coord[i] = 0;
            }
        }
    };
    let threads = rayon::current_num_threads();
    if d.len() < PAR_MIN || threads <= 1 || rows < 2 {
        run(d, 0);
    } else {
        let per = rows.div_ceil(threads * 4).max(1);
        d.par_chunks_mut(per * last)
            .enumerate()
            .for_each(|(i, chunk)| run(chunk, i * per));
    }
}

/// Fills `dst` (row-major) with `src[base + Σ coord[k] * strides[k]]` where strides may be
/// negative (a reversed slice). Every addressed element must lie inside `src`: the caller
/// derives `base` and `strides` from extents that fit.
pub fn strided_gather(src: &Tensor, base: usize, strides: &[isize], dst: &mut Tensor) {
    let dims = dst.shape().to_vec();
    let es = src.elem_size();
    let s = src.bytes();
    let d = dst.bytes_mut();
    match es {
        1 => gather_signed_typed::<u8>(s, base, strides, d, &dims),
        2 => gather_signed_typed::<u16>(s, base, strides, d, &dims),
        4 => gather_signed_typed::<u32>(s, base, strides, d, &dims),
        _ => gather_signed_typed::<u64>(s, base, strides, d, &dims),
    }
}

/// Fills every element of `dst` with the bytes of one element, `value`.
pub fn fill_bytes(dst: &mut Tensor, value: &[u8]) {
    let es = value.len();
    let d = dst.bytes_mut();
    if value.iter().all(|&b| b == 0) {
        d.fill(0);
        return;
    }
    for chunk in d.chunks_exact_mut(es) {
        chunk.copy_from_slice(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    #[test]
    fn broadcasting_map_matches_naive_loops() {
        let a: Vec<f32> = (0..6).map(|x| x as f32).collect(); // [2, 3]
        let b: Vec<f32> = vec![10.0, 20.0]; // [2, 1]
        let dims = [2, 3];
        let mut out = vec![0f32; 6];
        map2(
            &a,
            &broadcast_strides(&[2, 3], &dims),
            &b,
            &broadcast_strides(&[2, 1], &dims),
            &mut out,
            &dims,
            |x, y| x + y,
        );
        assert_eq!(out, vec![10.0, 11.0, 12.0, 23.0, 24.0, 25.0]);
        // Rank 0.
        let mut one = vec![0f32; 1];
        map2(&[2.0f32], &[], &[3.0f32], &[], &mut one, &[], |x, y| x * y);
        assert_eq!(one, vec![6.0]);
    }

    #[test]
    fn strided_copy_transposes() {
        let src = Tensor::from_slice(DType::I64, &[2, 3], &[0i64, 1, 2, 3, 4, 5]).unwrap();
        let mut dst = Tensor::zeros(DType::I64, &[3, 2]).unwrap();
        strided_copy(&src, 0, &[1, 3], &mut dst);
        assert_eq!(dst.as_slice::<i64>(), &[0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn strided_gather_reverses() {
        let src = Tensor::from_slice(DType::I32, &[2, 3], &[0i32, 1, 2, 3, 4, 5]).unwrap();
        // Rows reversed, every other column from the last: [[5, 3], [2, 0]].
        let mut dst = Tensor::zeros(DType::I32, &[2, 2]).unwrap();
        strided_gather(&src, 5, &[-3, -2], &mut dst);
        assert_eq!(dst.as_slice::<i32>(), &[5, 3, 2, 0]);
        let mut one = Tensor::zeros(DType::I32, &[]).unwrap();
        strided_gather(&src, 4, &[], &mut one);
        assert_eq!(one.as_slice::<i32>(), &[4]);
    }
}
