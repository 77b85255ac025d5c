//! Host tensors in the problem's storage type.

use std::borrow::Cow;

use half::{bf16, f16};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;

use crate::error::{GconvError, Result};
use crate::problem::{ConvProblem, DataType, Direction};

#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// A packed host tensor; its shape is implied by the problem and the tensor's role.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub data: TensorData,
}

/// A zeroed vector, or an error instead of an abort when memory runs out.
fn try_filled<T: Clone>(value: T, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        GconvError::Backend(format!(
            "out of memory: cannot allocate a tensor of {len} elements ({} bytes)",
            len.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    v.resize(len, value);
    Ok(v)
}

impl Tensor {
    pub fn zeros(dtype: DataType, len: usize) -> Self {
        Self::try_zeros(dtype, len).expect("tensor allocation")
    }

    pub fn try_zeros(dtype: DataType, len: usize) -> Result<Self> {
        let data = match dtype {
            DataType::F32 | DataType::Tf32 => TensorData::F32(try_filled(0.0, len)?),
            DataType::F16 => TensorData::F16(try_filled(f16::ZERO, len)?),
            DataType::Bf16 => TensorData::Bf16(try_filled(bf16::ZERO, len)?),
        };
        Ok(Tensor { data })
    }

    /// Values uniform in [-1, 1), rounded to the storage type; the same seed gives the same data.
    /// Chunks draw from generators of their own, in parallel: real layers hold 10^8 values.
    pub fn try_random(dtype: DataType, len: usize, seed: u64) -> Result<Self> {
        const CHUNK: usize = 1 << 16;
        fn fill<T: Send>(v: &mut [T], seed: u64, convert: impl Fn(f32) -> T + Sync) {
            v.par_chunks_mut(CHUNK).enumerate().for_each(|(i, chunk)| {
                let mut rng = SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                chunk.iter_mut().for_each(|x| *x = convert(rng.random_range(-1.0f32..1.0)));
            });
        }
        let mut t = Self::try_zeros(dtype, len)?;
        match &mut t.data {
            TensorData::F32(v) => fill(v, seed, |x| x),
            TensorData::F16(v) => fill(v, seed, f16::from_f32),
            TensorData::Bf16(v) => fill(v, seed, bf16::from_f32),
        }
        Ok(t)
    }

    pub fn from_f32(dtype: DataType, values: &[f32]) -> Self {
        let mut t = Self::zeros(dtype, values.len());
        t.store_f32(values);
        t
    }

    pub fn dtype(&self) -> DataType {
        match self.data {
            TensorData::F32(_) => DataType::F32,
            TensorData::F16(_) => DataType::F16,
            TensorData::Bf16(_) => DataType::Bf16,
        }
    }

    pub fn len(&self) -> usize {
        match &self.data {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::Bf16(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values widened to fp32: borrowed for fp32 storage, converted otherwise.
    pub fn to_f32(&self) -> Cow<'_, [f32]> {
        match &self.data {
            TensorData::F32(v) => Cow::Borrowed(v),
            TensorData::F16(v) => Cow::Owned(v.iter().map(|x| x.to_f32()).collect()),
            TensorData::Bf16(v) => Cow::Owned(v.iter().map(|x| x.to_f32()).collect()),
        }
    }

    /// Overwrites the tensor with `values`, rounding to nearest even in the storage type.
    pub fn store_f32(&mut self, values: &[f32]) {
        assert_eq!(values.len(), self.len(), "store_f32: length mismatch");
        match &mut self.data {
            TensorData::F32(v) => v.copy_from_slice(values),
            TensorData::F16(v) => v.iter_mut().zip(values).for_each(|(d, s)| *d = f16::from_f32(*s)),
            TensorData::Bf16(v) => v.iter_mut().zip(values).for_each(|(d, s)| *d = bf16::from_f32(*s)),
        }
    }

    /// Runs `compute` on a zeroed fp32 view of this tensor and stores the result: in place for
    /// fp32 storage, through a scratch buffer and one rounding for 16-bit storage.
    pub fn write_f32_with<R>(&mut self, compute: impl FnOnce(&mut [f32]) -> R) -> R {
        match &mut self.data {
            TensorData::F32(v) => {
                v.fill(0.0);
                compute(v)
            }
            _ => {
                let mut scratch = vec![0.0f32; self.len()];
                let result = compute(&mut scratch);
                self.store_f32(&scratch);
                result
            }
        }
    }

    /// The raw storage, e.g. for a copy to a device.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.data {
            TensorData::F32(v) => bytemuck::cast_slice(v),
            TensorData::F16(v) => bytemuck::cast_slice(v),
            TensorData::Bf16(v) => bytemuck::cast_slice(v),
        }
    }

    /// Overwrites the storage with raw bytes of the same length, e.g. copied from a device.
    pub fn copy_from_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let target: &mut [u8] = match &mut self.data {
            TensorData::F32(v) => bytemuck::cast_slice_mut(v),
            TensorData::F16(v) => bytemuck::cast_slice_mut(v),
            TensorData::Bf16(v) => bytemuck::cast_slice_mut(v),
        };
        if target.len() != bytes.len() {
            return Err(GconvError::TensorMismatch(format!(
                "{} bytes given for a tensor of {} bytes",
                bytes.len(),
                target.len()
            )));
        }
        target.copy_from_slice(bytes);
        Ok(())
    }

    pub fn fill_nan(&mut self) {
        match &mut self.data {
            TensorData::F32(v) => v.fill(f32::NAN),
            TensorData::F16(v) => v.fill(f16::NAN),
            TensorData::Bf16(v) => v.fill(bf16::NAN),
        }
    }
}

/// The three tensors of a convolution. Which are inputs depends on the direction: forward reads
/// x and w and writes y; backward-data reads y (dy) and w and writes x (dx); backward-weight
/// reads x and y (dy) and writes w (dw).
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTensors {
    pub x: Tensor,
    pub w: Tensor,
    pub y: Tensor,
}

impl ConvTensors {
    /// Random inputs for the problem's direction (from `seed`) and a NaN-filled output, so a
    /// solver that leaves part of its output unwritten cannot pass verification.
    pub fn random(p: &ConvProblem, seed: u64) -> Self {
        Self::try_random(p, seed).expect("tensor allocation")
    }

    /// As [`ConvTensors::random`], with an error when memory runs out.
    pub fn try_random(p: &ConvProblem, seed: u64) -> Result<Self> {
        let dt = p.dtype;
        let mut t = ConvTensors {
            x: Tensor::try_random(dt, p.input_elements() as usize, seed)?,
            w: Tensor::try_random(dt, p.weight_elements() as usize, seed.wrapping_add(1))?,
            y: Tensor::try_random(dt, p.output_elements() as usize, seed.wrapping_add(2))?,
        };
        t.output_mut(p.direction).fill_nan();
        Ok(t)
    }

    pub fn output(&self, direction: Direction) -> &Tensor {
        match direction {
            Direction::Forward => &self.y,
            Direction::BackwardData => &self.x,
            Direction::BackwardWeight => &self.w,
        }
    }

    pub fn output_mut(&mut self, direction: Direction) -> &mut Tensor {
        match direction {
            Direction::Forward => &mut self.y,
            Direction::BackwardData => &mut self.x,
            Direction::BackwardWeight => &mut self.w,
        }
    }

    /// Checks that the tensors have the sizes and storage type the problem needs.
    pub fn check(&self, p: &ConvProblem) -> Result<()> {
        for (name, t, want) in [
            ("x", &self.x, p.input_elements()),
            ("w", &self.w, p.weight_elements()),
            ("y", &self.y, p.output_elements()),
        ] {
            if t.len() as u64 != want || t.dtype() != p.dtype.storage() {
                return Err(GconvError::TensorMismatch(format!(
                    "tensor {name} holds {} {} elements, the problem needs {want} {}",
                    t.len(),
                    t.dtype(),
                    p.dtype.storage()
                )));
            }
        }
        Ok(())
    }
}
