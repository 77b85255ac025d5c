//! The cuDNN entry points gconv calls, from one library opened once.
//!
//! The soname is tried first: in a process that already holds a cuDNN (PyTorch opens its own at
//! import) it names that library, and gconv must use it. Two cuDNN versions in one process share
//! their sublibraries by soname, and the engines of the one loaded second then fail to load
//! (`CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED`). cudarc's loader tries the unversioned name first,
//! which finds the system's copy instead.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::cudnn::sys::{
    cudaStream_t, cudnnBackendAttributeName_t as Attr, cudnnBackendAttributeType_t as Type,
    cudnnBackendDescriptorType_t as Kind, cudnnBackendDescriptor_t as Raw, cudnnHandle_t, cudnnStatus_t as Status,
};
use libloading::Library;

/// The names tried, in order: cuDNN 9's soname, then the development link.
const NAMES: [&str; 2] = ["libcudnn.so.9", "libcudnn.so"];

pub struct Cudnn {
    pub get_version: unsafe extern "C" fn() -> usize,
    pub create: unsafe extern "C" fn(*mut cudnnHandle_t) -> Status,
    pub destroy: unsafe extern "C" fn(cudnnHandle_t) -> Status,
    pub set_stream: unsafe extern "C" fn(cudnnHandle_t, cudaStream_t) -> Status,
    pub create_descriptor: unsafe extern "C" fn(Kind, *mut Raw) -> Status,
    pub destroy_descriptor: unsafe extern "C" fn(Raw) -> Status,
    pub set_attribute: unsafe extern "C" fn(Raw, Attr, Type, i64, *const c_void) -> Status,
    pub get_attribute: unsafe extern "C" fn(Raw, Attr, Type, i64, *mut i64, *mut c_void) -> Status,
    pub finalize: unsafe extern "C" fn(Raw) -> Status,
    pub execute: unsafe extern "C" fn(cudnnHandle_t, Raw, Raw) -> Status,
}

/// The library, or None when no cuDNN can be opened.
pub fn cudnn() -> Option<&'static Cudnn> {
    static LIBRARY: OnceLock<Option<Cudnn>> = OnceLock::new();
    LIBRARY.get_or_init(|| NAMES.iter().find_map(|name| open(name))).as_ref()
}

fn open(name: &str) -> Option<Cudnn> {
    // SAFETY: opening cuDNN runs only its initialisers, which have no preconditions.
    let library = unsafe { Library::new(name) }.ok()?;
    // Never closed: the entry points below stay valid for the process's life.
    let library: &'static Library = Box::leak(Box::new(library));
    // SAFETY: each symbol is looked up with the signature of cuDNN 9's header (as cudarc's
    // bindings declare it).
    unsafe {
        Some(Cudnn {
            get_version: *library.get(b"cudnnGetVersion\0").ok()?,
            create: *library.get(b"cudnnCreate\0").ok()?,
            destroy: *library.get(b"cudnnDestroy\0").ok()?,
            set_stream: *library.get(b"cudnnSetStream\0").ok()?,
            create_descriptor: *library.get(b"cudnnBackendCreateDescriptor\0").ok()?,
            destroy_descriptor: *library.get(b"cudnnBackendDestroyDescriptor\0").ok()?,
            set_attribute: *library.get(b"cudnnBackendSetAttribute\0").ok()?,
            get_attribute: *library.get(b"cudnnBackendGetAttribute\0").ok()?,
            finalize: *library.get(b"cudnnBackendFinalize\0").ok()?,
            execute: *library.get(b"cudnnBackendExecute\0").ok()?,
        })
    }
}
