//! Strided matrix views over raw fp32 buffers and one GEMM entry point (the `gemm` crate).
//! Views are raw pointers because parallel tasks write disjoint parts of one tensor.

use gemm::Parallelism;

/// A matrix inside a buffer: element (r, c) is at `ptr + r*rs + c*cs`.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub ptr: *mut f32,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
}

// Views are only dereferenced inside `gemm`, on regions each task owns.
unsafe impl Send for View {}
unsafe impl Sync for View {}

impl View {
    /// A view of `slice`. Bounds are the caller's to uphold.
    pub fn of(slice: &[f32], span: Span) -> Self {
        span.check(slice.len());
        View::new(slice.as_ptr() as *mut f32, span)
    }

    /// A view into a buffer shared between tasks.
    pub fn at(base: SharedMut, span: Span) -> Self {
        span.check(base.len);
        View::new(base.ptr, span)
    }

    fn new(base: *mut f32, span: Span) -> Self {
        View {
            // SAFETY: `check` keeps the span inside the buffer in debug builds; callers uphold it.
            ptr: unsafe { base.add(span.offset) },
            rows: span.rows,
            cols: span.cols,
            rs: span.rs as isize,
            cs: span.cs as isize,
        }
    }

    pub fn t(self) -> Self {
        View { rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs, ..self }
    }
}

/// Where a matrix lies in a buffer: element (r, c) at `offset + r*rs + c*cs`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl Span {
    fn check(&self, len: usize) {
        debug_assert!(
            self.rows == 0
                || self.cols == 0
                || self.offset + (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < len,
            "matrix span {self:?} outside a buffer of {len}"
        );
    }
}

/// A mutable buffer that parallel tasks write in disjoint parts.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut {
    ptr: *mut f32,
    len: usize,
}

unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    pub fn new(slice: &mut [f32]) -> Self {
        SharedMut { ptr: slice.as_mut_ptr(), len: slice.len() }
    }

    /// # Safety
    /// The buffer must outlive `'a`, and no other task may access `[offset, offset + len)`
    /// while the slice lives.
    pub unsafe fn slice<'a>(self, offset: usize, len: usize) -> &'a mut [f32] {
        assert!(offset + len <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
    }
}

/// dst = lhs * rhs, or dst += lhs * rhs when `accumulate`.
///
/// # Safety
/// Every view must lie inside its buffer, and no other task may touch `dst` meanwhile.
pub(crate) unsafe fn gemm(dst: View, lhs: View, rhs: View, accumulate: bool, threads: usize) {
    debug_assert!(dst.rows == lhs.rows && dst.cols == rhs.cols && lhs.cols == rhs.rows);
    if dst.rows == 0 || dst.cols == 0 {
        return;
    }
    let parallelism = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
    gemm::gemm(
        dst.rows,
        dst.cols,
        lhs.cols,
        dst.ptr,
        dst.cs,
        dst.rs,
        accumulate,
        lhs.ptr,
        lhs.cs,
        lhs.rs,
        rhs.ptr,
        rhs.cs,
        rhs.rs,
        1.0,
        1.0,
        false,
        false,
        false,
        parallelism,
    );
}
