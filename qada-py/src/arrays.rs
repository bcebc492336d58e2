//! numpy arrays in: any float array (or nested list) becomes an `f32` view, read in place when
//! it already is a C-contiguous `float32` array; shapes are checked and named.

use ndarray::{ArrayView1, ArrayView2, ArrayViewD, Ix1, Ix2};
use numpy::{AllowTypeChange, PyArrayLikeDyn};
use pyo3::PyResult;

use crate::errors::bad_arg;

/// Any array-like of numbers, converted to `float32` by numpy only when it is not already.
pub type Floats<'py> = PyArrayLikeDyn<'py, f32, AllowTypeChange>;

/// The shape of a view, as numpy prints it.
pub fn shape_str(a: &ArrayViewD<'_, f32>) -> String {
    match a.shape() {
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `a` as a `(n, d)` matrix; with `d` given its columns must be `d`.
pub fn matrix<'a>(
    arg: &str,
    a: ArrayViewD<'a, f32>,
    d: Option<usize>,
) -> PyResult<ArrayView2<'a, f32>> {
    let shape = shape_str(&a);
    let m = a
        .into_dimensionality::<Ix2>()
        .map_err(|_| bad_arg(arg, "a 2-d array (n, d)", format!("shape {shape}")))?;
    if let Some(d) = d {
        if m.ncols() != d {
            return Err(bad_arg(
                arg,
                format!("(n, {d}) (d from q)"),
                format!("shape {shape}"),
            ));
        }
    }
    Ok(m)
}

/// `a` as a vector of length `d`.
pub fn vector<'a>(arg: &str, a: ArrayViewD<'a, f32>, d: usize) -> PyResult<ArrayView1<'a, f32>> {
    let shape = shape_str(&a);
    let v = a
        .into_dimensionality::<Ix1>()
        .map_err(|_| bad_arg(arg, format!("shape ({d},)"), format!("shape {shape}")))?;
    if v.len() != d {
        return Err(bad_arg(
            arg,
            format!("shape ({d},)"),
            format!("shape {shape}"),
        ));
    }
    Ok(v)
}

/// Keys as rows: `(n, d)` or a single key `(d,)` as `(1, d)`.
pub fn rows<'a>(arg: &str, a: ArrayViewD<'a, f32>, d: usize) -> PyResult<ArrayView2<'a, f32>> {
    if a.ndim() == 1 {
        let v = vector(arg, a, d)?;
        return Ok(v.insert_axis(ndarray::Axis(0)));
    }
    matrix(arg, a, Some(d))
}

/// Token ids from Python integers, each checked to lie below the vocabulary size `vocab`.
pub fn token_ids(arg: &str, ids: &[i64], vocab: usize) -> PyResult<Vec<u32>> {
    ids.iter()
        .map(|&t| match u32::try_from(t) {
            Ok(id) if (id as usize) < vocab => Ok(id),
            _ => Err(bad_arg(
                arg,
                format!("token ids in 0..{vocab} (the vocabulary)"),
                t,
            )),
        })
        .collect()
}

/// Keep the lifetime of a readonly array borrow explicit for callers.
pub fn view<'a>(a: &'a Floats<'_>) -> ArrayViewD<'a, f32> {
    a.as_array()
}
