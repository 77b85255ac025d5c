//! cuDNN's backend descriptors, safely: create, set attributes, finalize, read attributes,
//! destroy on drop. Every `unsafe` call into the backend API lives in this file (its entry points
//! come from `cudnn_library`).

use std::ffi::c_void;

use cudarc::cudnn::sys::{
    self, cudnnBackendAttributeName_t as Attr, cudnnBackendAttributeType_t as Type,
    cudnnBackendDescriptorType_t as Kind, cudnnStatus_t,
};
use gconv_core::{GconvError, Result};

use crate::cudnn_library::{cudnn, Cudnn};

/// A cuDNN status other than success, with what was being done.
pub fn status_error(what: &str, status: cudnnStatus_t) -> GconvError {
    GconvError::Backend(format!("cuDNN: {what}: {status:?}"))
}

/// The opened library; a descriptor or handle exists only once it has opened.
fn lib() -> Result<&'static Cudnn> {
    cudnn().ok_or_else(|| GconvError::Backend("cuDNN: the library cannot be opened".into()))
}

fn check(what: &str, status: cudnnStatus_t) -> Result<()> {
    match status {
        cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        s => Err(status_error(what, s)),
    }
}

/// One backend descriptor, destroyed on drop.
pub struct Descriptor {
    raw: sys::cudnnBackendDescriptor_t,
    kind: Kind,
}

// SAFETY: a descriptor is host memory owned by this value; gconv uses cuDNN objects from one
// thread at a time (under the library's lock).
unsafe impl Send for Descriptor {}
unsafe impl Sync for Descriptor {}

impl Descriptor {
    pub fn new(kind: Kind) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check("create a descriptor", unsafe { (lib()?.create_descriptor)(kind, &mut raw) })?;
        Ok(Descriptor { raw, kind })
    }

    pub fn raw(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw
    }

    /// Sets `attr` to `values`, which must be of the element type `ty` stands for.
    fn set<T>(&self, attr: Attr, ty: Type, values: &[T]) -> Result<()> {
        // SAFETY: `values` holds values.len() elements of the type `ty` names, valid for the call.
        let status = unsafe {
            (lib()?.set_attribute)(self.raw, attr, ty, values.len() as i64, values.as_ptr() as *const c_void)
        };
        check(&format!("set {attr:?} of {:?}", self.kind), status)
    }

    pub fn set_i64s(self, attr: Attr, values: &[i64]) -> Result<Self> {
        self.set(attr, Type::CUDNN_TYPE_INT64, values)?;
        Ok(self)
    }

    pub fn set_f32(self, attr: Attr, value: f32) -> Result<Self> {
        self.set(attr, Type::CUDNN_TYPE_FLOAT, &[value])?;
        Ok(self)
    }

    /// An enum-valued attribute (data type, convolution mode, heuristic mode, knob type).
    pub fn set_enum(self, attr: Attr, ty: Type, value: u32) -> Result<Self> {
        self.set(attr, ty, &[value])?;
        Ok(self)
    }

    pub fn set_descriptors(self, attr: Attr, values: &[&Descriptor]) -> Result<Self> {
        let raw: Vec<sys::cudnnBackendDescriptor_t> = values.iter().map(|d| d.raw).collect();
        self.set(attr, Type::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)?;
        Ok(self)
    }

    pub fn set_handle(self, attr: Attr, handle: sys::cudnnHandle_t) -> Result<Self> {
        self.set(attr, Type::CUDNN_TYPE_HANDLE, &[handle])?;
        Ok(self)
    }

    pub fn set_pointers(self, attr: Attr, values: &[*mut c_void]) -> Result<Self> {
        self.set(attr, Type::CUDNN_TYPE_VOID_PTR, values)?;
        Ok(self)
    }

    pub fn finalize(self) -> Result<Self> {
        // SAFETY: a live descriptor.
        check(&format!("finalize {:?}", self.kind), unsafe { (lib()?.finalize)(self.raw) })?;
        Ok(self)
    }

    /// Reads up to `capacity` elements of `attr` into a buffer of `T`, the element type `ty`
    /// stands for (enums are read as u32).
    fn get<T: Copy + Default>(&self, attr: Attr, ty: Type, capacity: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); capacity];
        let mut count = 0i64;
        // SAFETY: `out` holds `capacity` elements of the type `ty` names.
        let status = unsafe {
            (lib()?.get_attribute)(self.raw, attr, ty, capacity as i64, &mut count, out.as_mut_ptr() as *mut c_void)
        };
        check(&format!("read {attr:?} of {:?}", self.kind), status)?;
        out.truncate((count.max(0) as usize).min(capacity));
        Ok(out)
    }

    pub fn get_i64(&self, attr: Attr) -> Result<i64> {
        self.get::<i64>(attr, Type::CUDNN_TYPE_INT64, 1)?
            .first()
            .copied()
            .ok_or_else(|| status_error(&format!("read {attr:?}"), cudnnStatus_t::CUDNN_STATUS_BAD_PARAM))
    }

    pub fn get_enums(&self, attr: Attr, ty: Type, capacity: usize) -> Result<Vec<u32>> {
        self.get::<u32>(attr, ty, capacity)
    }

    /// How many descriptors `attr` holds.
    pub fn count(&self, attr: Attr) -> Result<usize> {
        let mut count = 0i64;
        // SAFETY: a count query: no elements requested, no buffer written.
        let status = unsafe {
            (lib()?.get_attribute)(
                self.raw,
                attr,
                Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                0,
                &mut count,
                std::ptr::null_mut(),
            )
        };
        check(&format!("count {attr:?} of {:?}", self.kind), status)?;
        Ok(count.max(0) as usize)
    }

    /// Reads up to `capacity` descriptors of `kind` held by `attr`; cuDNN fills descriptors we
    /// created.
    pub fn get_descriptors(&self, attr: Attr, kind: Kind, capacity: usize) -> Result<Vec<Descriptor>> {
        let mut slots = (0..capacity).map(|_| Descriptor::new(kind)).collect::<Result<Vec<_>>>()?;
        let mut raw: Vec<sys::cudnnBackendDescriptor_t> = slots.iter().map(|d| d.raw).collect();
        let mut count = 0i64;
        // SAFETY: `raw` holds `capacity` created descriptors of the kind the attribute holds.
        let status = unsafe {
            (lib()?.get_attribute)(
                self.raw,
                attr,
                Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                capacity as i64,
                &mut count,
                raw.as_mut_ptr() as *mut c_void,
            )
        };
        check(&format!("read {attr:?} of {:?}", self.kind), status)?;
        slots.truncate((count.max(0) as usize).min(capacity));
        Ok(slots)
    }
}

impl Drop for Descriptor {
    fn drop(&mut self) {
        if let Some(lib) = cudnn() {
            // SAFETY: created by cudnnBackendCreateDescriptor and destroyed once.
            unsafe { (lib.destroy_descriptor)(self.raw) };
        }
    }
}

/// A cuDNN handle; each execution names its stream.
pub struct Handle(sys::cudnnHandle_t);

// SAFETY: a handle may move between threads; it is used by one thread at a time (the
// library's lock).
unsafe impl Send for Handle {}

impl Handle {
    pub fn new() -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the caller's context is current on this thread.
        check("create a handle", unsafe { (lib()?.create)(&mut raw) })?;
        Ok(Handle(raw))
    }

    pub fn raw(&self) -> sys::cudnnHandle_t {
        self.0
    }

    /// Runs a finalized plan with a finalized variant pack on `stream`.
    pub fn execute(&self, stream: sys::cudaStream_t, plan: &Descriptor, variant_pack: &Descriptor) -> Result<()> {
        // SAFETY: a live handle and a live stream of the current context.
        check("set the stream", unsafe { (lib()?.set_stream)(self.0, stream) })?;
        // SAFETY: live descriptors of the right kinds; the variant pack's pointers are valid
        // device buffers sized for the plan's problem (checked by the caller).
        check("execute a plan", unsafe { (lib()?.execute)(self.0, plan.raw, variant_pack.raw) })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(lib) = cudnn() {
            // SAFETY: created by cudnnCreate and destroyed once.
            unsafe { (lib.destroy)(self.0) };
        }
    }
}
