//! oneDNN 2.x (`libdnnl.so.2`, Debian `libdnnl2`), loaded at run time.
//!
//! [`sys`] holds hand-written declarations of the C API that the backend needs, written from
//! oneDNN 2.6's `dnnl.h`/`dnnl_types.h`: the descriptor structs, which the 2.x API has the
//! caller allocate, as opaque 8-aligned byte blocks of the header's sizes, and the enum and
//! macro values. The unit test `abi_matches_the_installed_header` compiles `dnnl_abi.c` against
//! the installed header (Debian `libdnnl-dev`; the crate itself never needs it) and compares
//! every size and value with this file.
//!
//! The safe layer above it: [`Dnnl`] (the loaded library: memory and operation descriptors),
//! [`Engine`], [`Stream`], [`Memory`], [`PostOps`], [`Attr`], [`PrimitiveDesc`] (with the
//! layouts a primitive chose for `any` and its implementation name) and [`Primitive`], each
//! releasing its handle when dropped, and [`Error`], which carries the failing call and its
//! status. docs/backends.md describes how a backend builds each composite from them.
//!
//! Threads: oneDNN's engines and primitives may be used from several threads at once (a
//! primitive executed concurrently needs a stream and, with a user scratchpad, a scratchpad per
//! thread), so [`Engine`], [`PrimitiveDesc`] and [`Primitive`] are `Send + Sync`; streams,
//! memory objects, attributes and post-ops are `Send` only. Debian's build runs its parallel
//! loops on OpenMP in the calling thread ([`super::omp`]).

use super::{Availability, LibrarySpec, LoadError, Loaded};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Where oneDNN is found.
pub const SPEC: LibrarySpec = LibrarySpec {
    what: "oneDNN",
    soname: "libdnnl.so.2",
    env: "COLLAGE_DNNL_LIBRARY",
    package: "libdnnl2",
    probe: "dnnl_version",
    preferred_dir: None,
};

/// The C ABI of oneDNN 2.6, declared by hand.
pub mod sys {
    use std::ffi::{c_char, c_int, c_uint, c_void};

    /// `DNNL_MAX_NDIMS`.
    pub const MAX_NDIMS: usize = 12;
    /// `dnnl_dims_t`.
    pub type Dims = [i64; MAX_NDIMS];
    /// `DNNL_RUNTIME_DIM_VAL`.
    pub const RUNTIME_DIM_VAL: i64 = i64::MIN;

    /// `dnnl_status_t`.
    pub type Status = c_int;
    /// `dnnl_success`.
    pub const SUCCESS: Status = 0;
    /// `dnnl_out_of_memory`.
    pub const OUT_OF_MEMORY: Status = 1;
    /// `dnnl_invalid_arguments`.
    pub const INVALID_ARGUMENTS: Status = 2;
    /// `dnnl_unimplemented`.
    pub const UNIMPLEMENTED: Status = 3;
    /// `dnnl_iterator_ends`.
    pub const ITERATOR_ENDS: Status = 4;
    /// `dnnl_runtime_error`.
    pub const RUNTIME_ERROR: Status = 5;
    /// `dnnl_not_required`.
    pub const NOT_REQUIRED: Status = 6;

    /// `dnnl_data_type_undef`.
    pub const DATA_TYPE_UNDEF: c_int = 0;
    /// `dnnl_f16`.
    pub const F16: c_int = 1;
    /// `dnnl_bf16`.
    pub const BF16: c_int = 2;
    /// `dnnl_f32`.
    pub const F32: c_int = 3;
    /// `dnnl_s32`.
    pub const S32: c_int = 4;
    /// `dnnl_s8`.
    pub const S8: c_int = 5;
    /// `dnnl_u8`.
    pub const U8: c_int = 6;

    /// `dnnl_format_tag_undef`.
    pub const FORMAT_TAG_UNDEF: c_int = 0;
    /// `dnnl_format_tag_any`: the primitive chooses.
    pub const FORMAT_TAG_ANY: c_int = 1;
    /// `dnnl_a` (`x`).
    pub const TAG_A: c_int = 2;
    /// `dnnl_ab` (`nc`, `oi`).
    pub const TAG_AB: c_int = 3;
    /// `dnnl_abc` (`ncw`, `oiw`).
    pub const TAG_ABC: c_int = 4;
    /// `dnnl_abcd` (`nchw`, `oihw`).
    pub const TAG_ABCD: c_int = 5;
    /// `dnnl_abcde` (`ncdhw`, `oidhw`, `goihw`).
    pub const TAG_ABCDE: c_int = 7;
    /// `dnnl_abcdef` (`goidhw`).
    pub const TAG_ABCDEF: c_int = 8;
    /// `dnnl_ba` (a `[N, K]` matrix seen as `{K, N}`).
    pub const TAG_BA: c_int = 22;
    /// `dnnl_acb` (a batch of transposed matrices).
    pub const TAG_ACB: c_int = 17;
    /// `dnnl_abdc`.
    pub const TAG_ABDC: c_int = 15;
    /// `dnnl_aBcd16b` (`dnnl_nChw16c`).
    pub const TAG_A_B16_CD: c_int = 69;

    /// `dnnl_cpu`.
    pub const ENGINE_CPU: c_int = 1;
    /// `dnnl_stream_default_flags`.
    pub const STREAM_DEFAULT_FLAGS: c_uint = 1;
    /// `dnnl_forward_inference`.
    pub const FORWARD_INFERENCE: c_int = 96;

    /// `dnnl_convolution_direct`.
    pub const CONVOLUTION_DIRECT: c_int = 1;
    /// `dnnl_convolution_winograd`.
    pub const CONVOLUTION_WINOGRAD: c_int = 2;
    /// `dnnl_deconvolution_direct`.
    pub const DECONVOLUTION_DIRECT: c_int = 10;
    /// `dnnl_eltwise_relu` (alpha: negative slope).
    pub const ELTWISE_RELU: c_int = 31;
    /// `dnnl_eltwise_tanh`.
    pub const ELTWISE_TANH: c_int = 47;
    /// `dnnl_eltwise_logistic` (sigmoid).
    pub const ELTWISE_LOGISTIC: c_int = 175;
    /// `dnnl_eltwise_clip` (alpha: lower bound, beta: upper bound).
    pub const ELTWISE_CLIP: c_int = 255;
    /// `dnnl_eltwise_linear` (alpha · x + beta).
    pub const ELTWISE_LINEAR: c_int = 127;
    /// `dnnl_eltwise_exp`.
    pub const ELTWISE_EXP: c_int = 191;
    /// `dnnl_eltwise_sqrt`.
    pub const ELTWISE_SQRT: c_int = 111;
    /// `dnnl_eltwise_abs`.
    pub const ELTWISE_ABS: c_int = 95;
    /// `dnnl_eltwise_gelu_tanh`.
    pub const ELTWISE_GELU_TANH: c_int = 207;
    /// `dnnl_eltwise_gelu_erf`.
    pub const ELTWISE_GELU_ERF: c_int = 48;
    /// `dnnl_eltwise_swish` (alpha: the sigmoid's scale).
    pub const ELTWISE_SWISH: c_int = 223;
    /// `dnnl_eltwise_mish`.
    pub const ELTWISE_MISH: c_int = 96;
    /// `dnnl_pooling_max`.
    pub const POOLING_MAX: c_int = 511;
    /// `dnnl_pooling_avg_include_padding`.
    pub const POOLING_AVG_INCLUDE_PADDING: c_int = 767;
    /// `dnnl_pooling_avg_exclude_padding`.
    pub const POOLING_AVG_EXCLUDE_PADDING: c_int = 1023;
    /// `dnnl_binary_add`.
    pub const BINARY_ADD: c_int = 131056;
    /// `dnnl_binary_mul`.
    pub const BINARY_MUL: c_int = 131057;
    /// `dnnl_binary_sub`.
    pub const BINARY_SUB: c_int = 131061;
    /// `dnnl_binary_div`.
    pub const BINARY_DIV: c_int = 131060;
    /// `dnnl_binary_max`.
    pub const BINARY_MAX: c_int = 131058;
    /// `dnnl_binary_min`.
    pub const BINARY_MIN: c_int = 131059;

    /// `dnnl_use_global_stats`.
    pub const USE_GLOBAL_STATS: c_uint = 1;
    /// `dnnl_fuse_norm_relu`.
    pub const FUSE_NORM_RELU: c_uint = 4;
    /// `dnnl_use_scale`.
    pub const USE_SCALE: c_uint = 8;
    /// `dnnl_use_shift`.
    pub const USE_SHIFT: c_uint = 16;

    /// `dnnl_scratchpad_mode_library`.
    pub const SCRATCHPAD_MODE_LIBRARY: c_int = 0;
    /// `dnnl_scratchpad_mode_user`.
    pub const SCRATCHPAD_MODE_USER: c_int = 1;

    /// `dnnl_query_impl_info_str`.
    pub const QUERY_IMPL_INFO_STR: c_int = 8;
    /// `dnnl_query_src_md`.
    pub const QUERY_SRC_MD: c_int = 129;
    /// `dnnl_query_weights_md` (index 1: the bias).
    pub const QUERY_WEIGHTS_MD: c_int = 131;
    /// `dnnl_query_dst_md`.
    pub const QUERY_DST_MD: c_int = 133;
    /// `dnnl_query_workspace_md`.
    pub const QUERY_WORKSPACE_MD: c_int = 135;
    /// `dnnl_query_scratchpad_md`.
    pub const QUERY_SCRATCHPAD_MD: c_int = 136;

    /// `DNNL_ARG_SRC` (also `DNNL_ARG_FROM`).
    pub const ARG_SRC: c_int = 1;
    /// `DNNL_ARG_SRC_1`.
    pub const ARG_SRC_1: c_int = 2;
    /// `DNNL_ARG_DST` (also `DNNL_ARG_TO`).
    pub const ARG_DST: c_int = 17;
    /// `DNNL_ARG_WEIGHTS`.
    pub const ARG_WEIGHTS: c_int = 33;
    /// `DNNL_ARG_BIAS`.
    pub const ARG_BIAS: c_int = 41;
    /// `DNNL_ARG_MEAN`.
    pub const ARG_MEAN: c_int = 49;
    /// `DNNL_ARG_VARIANCE`.
    pub const ARG_VARIANCE: c_int = 50;
    /// `DNNL_ARG_SCALE`.
    pub const ARG_SCALE: c_int = 51;
    /// `DNNL_ARG_SHIFT`.
    pub const ARG_SHIFT: c_int = 52;
    /// `DNNL_ARG_WORKSPACE`.
    pub const ARG_WORKSPACE: c_int = 64;
    /// `DNNL_ARG_SCRATCHPAD`.
    pub const ARG_SCRATCHPAD: c_int = 80;
    /// `DNNL_ARG_FROM`.
    pub const ARG_FROM: c_int = 1;
    /// `DNNL_ARG_TO`.
    pub const ARG_TO: c_int = 17;
    /// `DNNL_ARG_ATTR_MULTIPLE_POST_OP_BASE`.
    pub const ARG_ATTR_MULTIPLE_POST_OP_BASE: c_int = 16384;

    /// `DNNL_ARG_ATTR_MULTIPLE_POST_OP(index)`: the argument of post-op `index` (its binary
    /// operand is `post_op(index) | ARG_SRC_1`).
    pub const fn arg_post_op(index: c_int) -> c_int {
        ARG_ATTR_MULTIPLE_POST_OP_BASE * (index + 1)
    }

    /// `DNNL_RUNTIME_SEQ`.
    pub const RUNTIME_SEQ: c_uint = 1;
    /// `DNNL_RUNTIME_OMP`.
    pub const RUNTIME_OMP: c_uint = 2;
    /// `DNNL_RUNTIME_TBB`.
    pub const RUNTIME_TBB: c_uint = 4;
    /// `DNNL_RUNTIME_THREADPOOL`.
    pub const RUNTIME_THREADPOOL: c_uint = 8;

    macro_rules! opaque {
        ($($(#[$doc:meta])* $name:ident = $size:expr;)*) => {
            $(
                $(#[$doc])*
                #[repr(C, align(8))]
                #[derive(Clone, Copy)]
                pub struct $name(pub [u8; $size]);

                impl std::fmt::Debug for $name {
                    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, "{}({} bytes)", stringify!($name), $size)
                    }
                }

                impl $name {
                    /// All zeros, ready for an `*_init` function to fill.
                    pub const fn zeroed() -> $name {
                        $name([0; $size])
                    }
                }
            )*
        };
    }

    opaque! {
        /// `dnnl_memory_desc_t` (696 bytes in 2.6).
        MemoryDesc = 696;
        /// `dnnl_convolution_desc_t`, also `dnnl_deconvolution_desc_t`.
        ConvolutionDesc = 5976;
        /// `dnnl_inner_product_desc_t`.
        InnerProductDesc = 5584;
        /// `dnnl_matmul_desc_t`.
        MatmulDesc = 2800;
        /// `dnnl_eltwise_desc_t`.
        EltwiseDesc = 1416;
        /// `dnnl_layer_normalization_desc_t`.
        LayerNormalizationDesc = 3496;
        /// `dnnl_batch_normalization_desc_t`.
        BatchNormalizationDesc = 3496;
        /// `dnnl_softmax_desc_t`.
        SoftmaxDesc = 1408;
        /// `dnnl_pooling_desc_t`.
        PoolingDesc = 3192;
        /// `dnnl_binary_desc_t`.
        BinaryDesc = 2096;
    }

    /// `dnnl_exec_arg_t`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct ExecArg {
        /// `DNNL_ARG_*`.
        pub arg: c_int,
        /// `dnnl_memory_t`.
        pub memory: *mut c_void,
    }

    /// `dnnl_version_t`.
    #[repr(C)]
    #[derive(Debug)]
    pub struct Version {
        /// Major version.
        pub major: c_int,
        /// Minor version.
        pub minor: c_int,
        /// Patch version.
        pub patch: c_int,
        /// The git hash of the sources.
        pub hash: *const c_char,
        /// `DNNL_RUNTIME_*` of the CPU.
        pub cpu_runtime: c_uint,
        /// `DNNL_RUNTIME_*` of the GPU.
        pub gpu_runtime: c_uint,
    }

    /// An opaque handle (`dnnl_engine_t`, `dnnl_memory_t`, ...).
    pub type Handle = *mut c_void;
}

use sys::{Handle, MemoryDesc, Status};

macro_rules! api {
    ($($name:ident: fn($($arg:ty),* $(,)?) -> $ret:ty;)*) => {
        /// The oneDNN functions used, resolved when the library is loaded.
        #[allow(missing_docs)]
        pub struct Api {
            lib: Loaded,
            $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl Api {
            fn resolve(lib: Loaded) -> std::result::Result<Api, LoadError> {
                // SAFETY: every type is the exact signature of oneDNN 2.6's declaration.
                unsafe { Ok(Api { $($name: lib.function(stringify!($name))?,)* lib }) }
            }
        }
    };
}

api! {
    dnnl_version: fn() -> *const sys::Version;
    dnnl_engine_create: fn(*mut Handle, c_int, usize) -> Status;
    dnnl_engine_destroy: fn(Handle) -> Status;
    dnnl_stream_create: fn(*mut Handle, Handle, c_uint) -> Status;
    dnnl_stream_wait: fn(Handle) -> Status;
    dnnl_stream_destroy: fn(Handle) -> Status;
    dnnl_memory_desc_init_by_tag: fn(*mut MemoryDesc, c_int, *const i64, c_int, c_int) -> Status;
    dnnl_memory_desc_init_by_strides:
        fn(*mut MemoryDesc, c_int, *const i64, c_int, *const i64) -> Status;
    dnnl_memory_desc_reshape: fn(*mut MemoryDesc, *const MemoryDesc, c_int, *const i64) -> Status;
    dnnl_memory_desc_permute_axes: fn(*mut MemoryDesc, *const MemoryDesc, *const c_int) -> Status;
    dnnl_memory_desc_equal: fn(*const MemoryDesc, *const MemoryDesc) -> c_int;
    dnnl_memory_desc_get_size: fn(*const MemoryDesc) -> usize;
    dnnl_memory_create: fn(*mut Handle, *const MemoryDesc, Handle, *mut c_void) -> Status;
    dnnl_memory_get_data_handle: fn(Handle, *mut *mut c_void) -> Status;
    dnnl_memory_set_data_handle: fn(Handle, *mut c_void) -> Status;
    dnnl_memory_destroy: fn(Handle) -> Status;
    dnnl_dilated_convolution_forward_desc_init: fn(
        *mut sys::ConvolutionDesc, c_int, c_int, *const MemoryDesc, *const MemoryDesc,
        *const MemoryDesc, *const MemoryDesc, *const i64, *const i64, *const i64, *const i64,
    ) -> Status;
    dnnl_dilated_deconvolution_forward_desc_init: fn(
        *mut sys::ConvolutionDesc, c_int, c_int, *const MemoryDesc, *const MemoryDesc,
        *const MemoryDesc, *const MemoryDesc, *const i64, *const i64, *const i64, *const i64,
    ) -> Status;
    dnnl_inner_product_forward_desc_init: fn(
        *mut sys::InnerProductDesc, c_int, *const MemoryDesc, *const MemoryDesc,
        *const MemoryDesc, *const MemoryDesc,
    ) -> Status;
    dnnl_matmul_desc_init: fn(
        *mut sys::MatmulDesc, *const MemoryDesc, *const MemoryDesc, *const MemoryDesc,
        *const MemoryDesc,
    ) -> Status;
    dnnl_eltwise_forward_desc_init:
        fn(*mut sys::EltwiseDesc, c_int, c_int, *const MemoryDesc, f32, f32) -> Status;
    dnnl_layer_normalization_forward_desc_init: fn(
        *mut sys::LayerNormalizationDesc, c_int, *const MemoryDesc, *const MemoryDesc, f32,
        c_uint,
    ) -> Status;
    dnnl_batch_normalization_forward_desc_init:
        fn(*mut sys::BatchNormalizationDesc, c_int, *const MemoryDesc, f32, c_uint) -> Status;
    dnnl_softmax_forward_desc_init:
        fn(*mut sys::SoftmaxDesc, c_int, *const MemoryDesc, c_int) -> Status;
    dnnl_pooling_forward_desc_init: fn(
        *mut sys::PoolingDesc, c_int, c_int, *const MemoryDesc, *const MemoryDesc, *const i64,
        *const i64, *const i64, *const i64,
    ) -> Status;
    dnnl_binary_desc_init: fn(
        *mut sys::BinaryDesc, c_int, *const MemoryDesc, *const MemoryDesc, *const MemoryDesc,
    ) -> Status;
    dnnl_primitive_attr_create: fn(*mut Handle) -> Status;
    dnnl_primitive_attr_destroy: fn(Handle) -> Status;
    dnnl_primitive_attr_set_post_ops: fn(Handle, Handle) -> Status;
    dnnl_primitive_attr_set_scratchpad_mode: fn(Handle, c_int) -> Status;
    dnnl_post_ops_create: fn(*mut Handle) -> Status;
    dnnl_post_ops_destroy: fn(Handle) -> Status;
    dnnl_post_ops_append_eltwise: fn(Handle, f32, c_int, f32, f32) -> Status;
    dnnl_post_ops_append_sum: fn(Handle, f32) -> Status;
    dnnl_post_ops_append_binary: fn(Handle, c_int, *const MemoryDesc) -> Status;
    dnnl_primitive_desc_create: fn(*mut Handle, *const c_void, Handle, Handle, Handle) -> Status;
    dnnl_primitive_desc_destroy: fn(Handle) -> Status;
    dnnl_primitive_desc_query: fn(Handle, c_int, c_int, *mut c_void) -> Status;
    dnnl_primitive_desc_query_md: fn(Handle, c_int, c_int) -> *const MemoryDesc;
    dnnl_reorder_primitive_desc_create: fn(
        *mut Handle, *const MemoryDesc, Handle, *const MemoryDesc, Handle, Handle,
    ) -> Status;
    dnnl_primitive_create: fn(*mut Handle, Handle) -> Status;
    dnnl_primitive_execute: fn(Handle, Handle, c_int, *const sys::ExecArg) -> Status;
    dnnl_primitive_destroy: fn(Handle) -> Status;
}

/// A oneDNN call that failed: the function and its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    /// The `dnnl_status_t` it returned.
    pub status: Status,
    /// The function called.
    pub call: &'static str,
}

impl Error {
    /// The status's name.
    pub fn status_name(&self) -> &'static str {
        match self.status {
            sys::SUCCESS => "success",
            sys::OUT_OF_MEMORY => "out of memory",
            sys::INVALID_ARGUMENTS => "invalid arguments",
            sys::UNIMPLEMENTED => "unimplemented",
            sys::ITERATOR_ENDS => "iterator ends",
            sys::RUNTIME_ERROR => "runtime error",
            sys::NOT_REQUIRED => "not required",
            _ => "unknown status",
        }
    }

    /// Whether oneDNN has no implementation for what was asked, or rejected its arguments: the
    /// composite is unsupported on this machine rather than the program being wrong.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.status, sys::UNIMPLEMENTED | sys::INVALID_ARGUMENTS)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "oneDNN: {} failed: {} (status {})",
            self.call,
            self.status_name(),
            self.status
        )
    }
}

impl std::error::Error for Error {}

/// The result of a oneDNN call.
pub type Result<T> = std::result::Result<T, Error>;

fn check(status: Status, call: &'static str) -> Result<()> {
    if status == sys::SUCCESS {
        Ok(())
    } else {
        Err(Error { status, call })
    }
}

/// A `dnnl_dims_t` from a slice of at most 12 extents.
fn dims(v: &[i64], call: &'static str) -> Result<sys::Dims> {
    if v.len() > sys::MAX_NDIMS {
        return Err(Error {
            status: sys::INVALID_ARGUMENTS,
            call,
        });
    }
    let mut d = [0i64; sys::MAX_NDIMS];
    d[..v.len()].copy_from_slice(v);
    Ok(d)
}

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    /// `dnnl_f32`.
    F32,
    /// `dnnl_f16`.
    F16,
    /// `dnnl_bf16`.
    BF16,
    /// `dnnl_s32`.
    S32,
    /// `dnnl_s8`.
    S8,
    /// `dnnl_u8`.
    U8,
}

impl DataType {
    fn raw(self) -> c_int {
        match self {
            DataType::F32 => sys::F32,
            DataType::F16 => sys::F16,
            DataType::BF16 => sys::BF16,
            DataType::S32 => sys::S32,
            DataType::S8 => sys::S8,
            DataType::U8 => sys::U8,
        }
    }
}

/// A memory format tag (`dnnl_format_tag_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub c_int);

impl Tag {
    /// Let the primitive choose (`dnnl_format_tag_any`).
    pub const ANY: Tag = Tag(sys::FORMAT_TAG_ANY);
    /// `a`.
    pub const A: Tag = Tag(sys::TAG_A);
    /// `ab`.
    pub const AB: Tag = Tag(sys::TAG_AB);
    /// `abc`.
    pub const ABC: Tag = Tag(sys::TAG_ABC);
    /// `abcd`.
    pub const ABCD: Tag = Tag(sys::TAG_ABCD);
    /// `abcde`.
    pub const ABCDE: Tag = Tag(sys::TAG_ABCDE);
    /// `abcdef`.
    pub const ABCDEF: Tag = Tag(sys::TAG_ABCDEF);
    /// `ba`.
    pub const BA: Tag = Tag(sys::TAG_BA);
    /// `acb`.
    pub const ACB: Tag = Tag(sys::TAG_ACB);
    /// `dnnl_aBcd16b`: 4-D with the second axis in blocks of 16 (`nChw16c`).
    pub const A_B16_CD: Tag = Tag(sys::TAG_A_B16_CD);
    /// `abdc`.
    pub const ABDC: Tag = Tag(sys::TAG_ABDC);

    /// The dense row-major tag of a rank (`a`, `ab`, ... `abcdef`).
    pub fn plain(rank: usize) -> Option<Tag> {
        Some(match rank {
            1 => Tag::A,
            2 => Tag::AB,
            3 => Tag::ABC,
            4 => Tag::ABCD,
            5 => Tag::ABCDE,
            6 => Tag::ABCDEF,
            _ => return None,
        })
    }
}

/// A `dnnl_alg_kind_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alg(pub c_int);

impl Alg {
    /// ReLU (alpha: the negative slope).
    pub const RELU: Alg = Alg(sys::ELTWISE_RELU);
    /// tanh.
    pub const TANH: Alg = Alg(sys::ELTWISE_TANH);
    /// Sigmoid.
    pub const LOGISTIC: Alg = Alg(sys::ELTWISE_LOGISTIC);
    /// Clip to [alpha, beta].
    pub const CLIP: Alg = Alg(sys::ELTWISE_CLIP);
    /// alpha · x + beta.
    pub const LINEAR: Alg = Alg(sys::ELTWISE_LINEAR);
    /// exp.
    pub const EXP: Alg = Alg(sys::ELTWISE_EXP);
    /// sqrt.
    pub const SQRT: Alg = Alg(sys::ELTWISE_SQRT);
    /// abs.
    pub const ABS: Alg = Alg(sys::ELTWISE_ABS);
    /// GELU, tanh form.
    pub const GELU_TANH: Alg = Alg(sys::ELTWISE_GELU_TANH);
    /// GELU, erf form.
    pub const GELU_ERF: Alg = Alg(sys::ELTWISE_GELU_ERF);
    /// x · sigmoid(alpha · x).
    pub const SWISH: Alg = Alg(sys::ELTWISE_SWISH);
    /// x · tanh(softplus(x)).
    pub const MISH: Alg = Alg(sys::ELTWISE_MISH);
    /// Max pooling.
    pub const POOLING_MAX: Alg = Alg(sys::POOLING_MAX);
    /// Average pooling counting the padding.
    pub const POOLING_AVG_INCLUDE_PADDING: Alg = Alg(sys::POOLING_AVG_INCLUDE_PADDING);
    /// Average pooling over the valid elements only.
    pub const POOLING_AVG_EXCLUDE_PADDING: Alg = Alg(sys::POOLING_AVG_EXCLUDE_PADDING);
    /// Elementwise (broadcasting) add.
    pub const BINARY_ADD: Alg = Alg(sys::BINARY_ADD);
    /// Elementwise multiply.
    pub const BINARY_MUL: Alg = Alg(sys::BINARY_MUL);
    /// Elementwise subtract.
    pub const BINARY_SUB: Alg = Alg(sys::BINARY_SUB);
    /// Elementwise divide.
    pub const BINARY_DIV: Alg = Alg(sys::BINARY_DIV);
    /// Elementwise maximum.
    pub const BINARY_MAX: Alg = Alg(sys::BINARY_MAX);
    /// Elementwise minimum.
    pub const BINARY_MIN: Alg = Alg(sys::BINARY_MIN);
}

/// The loaded library's version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// Major, minor, patch.
    pub major: i32,
    /// Minor.
    pub minor: i32,
    /// Patch.
    pub patch: i32,
    /// The git hash of its sources.
    pub hash: String,
    /// Its CPU threading runtime: `OpenMP`, `sequential`, `TBB`, `threadpool`.
    pub cpu_runtime: &'static str,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{} ({} CPU runtime",
            self.major, self.minor, self.patch, self.cpu_runtime
        )?;
        if !self.hash.is_empty() && self.hash != "N/A" {
            write!(f, ", {}", self.hash)?;
        }
        f.write_str(")")
    }
}

/// An operation descriptor, ready for [`PrimitiveDesc::new`].
pub struct OpDesc {
    /// The struct, as 8-aligned words.
    words: Box<[u64]>,
    /// What it describes, for errors: `convolution`.
    pub kind: &'static str,
}

impl OpDesc {
    fn new<T: Copy>(kind: &'static str, fill: impl FnOnce(*mut T) -> Result<()>) -> Result<OpDesc> {
        let n = std::mem::size_of::<T>().div_ceil(8);
        let mut words = vec![0u64; n].into_boxed_slice();
        debug_assert!(std::mem::align_of::<T>() <= 8);
        fill(words.as_mut_ptr() as *mut T)?;
        Ok(OpDesc { words, kind })
    }

    fn as_ptr(&self) -> *const c_void {
        self.words.as_ptr() as *const c_void
    }
}

/// What a convolution computes (forward inference).
#[derive(Clone, Debug)]
pub struct Convolution<'a> {
    /// Source (`any` to let the primitive choose its layout).
    pub src: &'a MemoryDesc,
    /// Weights: `{O, I, spatial...}`, or `{G, O/G, I/G, spatial...}` for groups.
    pub weights: &'a MemoryDesc,
    /// Bias `{O}`, if any.
    pub bias: Option<&'a MemoryDesc>,
    /// Destination.
    pub dst: &'a MemoryDesc,
    /// Strides per spatial axis.
    pub strides: &'a [i64],
    /// Dilation per spatial axis, minus one (0: none), as oneDNN counts it.
    pub dilates: &'a [i64],
    /// Padding before each spatial axis.
    pub pad_l: &'a [i64],
    /// Padding after each spatial axis.
    pub pad_r: &'a [i64],
    /// A transposed convolution (`dnnl_deconvolution_direct`).
    pub transposed: bool,
    /// Winograd's algorithm (`dnnl_convolution_winograd`) instead of the direct one; oneDNN
    /// refuses it where it has no implementation (not transposed only).
    pub winograd: bool,
}

/// The loaded oneDNN library; cheap to clone.
#[derive(Clone)]
pub struct Dnnl {
    api: Arc<Api>,
}

impl Dnnl {
    /// Loads the library `COLLAGE_DNNL_LIBRARY` names, else `libdnnl.so.2`.
    pub fn load() -> std::result::Result<Dnnl, LoadError> {
        Dnnl::from(super::open(&SPEC)?)
    }

    /// Loads the library from `file`.
    pub fn load_file(file: &str) -> std::result::Result<Dnnl, LoadError> {
        Dnnl::from(super::open_file(&SPEC, file)?)
    }

    /// The process's oneDNN (from `COLLAGE_DNNL_LIBRARY` or the default name), loaded once.
    pub fn shared() -> std::result::Result<Dnnl, LoadError> {
        static SHARED: OnceLock<std::result::Result<Dnnl, LoadError>> = OnceLock::new();
        SHARED.get_or_init(Dnnl::load).clone()
    }

    fn from(lib: Loaded) -> std::result::Result<Dnnl, LoadError> {
        let file = lib.path.display().to_string();
        let dnnl = Dnnl {
            api: Arc::new(Api::resolve(lib)?),
        };
        let v = dnnl.version();
        if v.major != 2 {
            return Err(LoadError {
                what: SPEC.what,
                file,
                package: SPEC.package,
                env: SPEC.env,
                reason: format!(
                    "it is version {v}; the declarations here are oneDNN 2.x's (3.x changed them)"
                ),
            });
        }
        Ok(dnnl)
    }

    /// The raw functions.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// Where the library was found.
    pub fn path(&self) -> &std::path::Path {
        &self.api.lib.path
    }

    /// The loaded library's version.
    pub fn version(&self) -> Version {
        // SAFETY: returns a pointer to a static struct.
        let v = unsafe { (self.api.dnnl_version)() };
        if v.is_null() {
            return Version {
                major: 0,
                minor: 0,
                patch: 0,
                hash: String::new(),
                cpu_runtime: "unknown",
            };
        }
        // SAFETY: non-null, static.
        let v = unsafe { &*v };
        Version {
            major: v.major,
            minor: v.minor,
            patch: v.patch,
            hash: unsafe { super::c_str(v.hash) }.unwrap_or_default(),
            cpu_runtime: match v.cpu_runtime {
                sys::RUNTIME_OMP => "OpenMP",
                sys::RUNTIME_SEQ => "sequential",
                sys::RUNTIME_TBB => "TBB",
                sys::RUNTIME_THREADPOOL => "threadpool",
                _ => "unknown",
            },
        }
    }

    /// A CPU engine.
    pub fn engine(&self) -> Result<Engine> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle.
        check(
            unsafe { (self.api.dnnl_engine_create)(&mut raw, sys::ENGINE_CPU, 0) },
            "dnnl_engine_create",
        )?;
        Ok(Engine {
            inner: Arc::new(EngineHandle {
                dnnl: self.clone(),
                raw,
            }),
        })
    }

    /// A memory descriptor of a dense layout given by a tag (or `any`).
    pub fn md(&self, shape: &[i64], dt: DataType, tag: Tag) -> Result<MemoryDesc> {
        const CALL: &str = "dnnl_memory_desc_init_by_tag";
        let d = dims(shape, CALL)?;
        let mut md = MemoryDesc::zeroed();
        // SAFETY: `d` holds 12 extents, `md` is a descriptor of the header's size.
        check(
            unsafe {
                (self.api.dnnl_memory_desc_init_by_tag)(
                    &mut md,
                    shape.len() as c_int,
                    d.as_ptr(),
                    dt.raw(),
                    tag.0,
                )
            },
            CALL,
        )?;
        Ok(md)
    }

    /// A memory descriptor of a strided layout (strides in elements, per axis).
    pub fn md_strides(&self, shape: &[i64], dt: DataType, strides: &[i64]) -> Result<MemoryDesc> {
        const CALL: &str = "dnnl_memory_desc_init_by_strides";
        if strides.len() != shape.len() {
            return Err(Error {
                status: sys::INVALID_ARGUMENTS,
                call: CALL,
            });
        }
        let (d, s) = (dims(shape, CALL)?, dims(strides, CALL)?);
        let mut md = MemoryDesc::zeroed();
        // SAFETY: as for `md`.
        check(
            unsafe {
                (self.api.dnnl_memory_desc_init_by_strides)(
                    &mut md,
                    shape.len() as c_int,
                    d.as_ptr(),
                    dt.raw(),
                    s.as_ptr(),
                )
            },
            CALL,
        )?;
        Ok(md)
    }

    /// The same memory seen with another shape (as `reshape`: the element count stays).
    pub fn md_reshape(&self, md: &MemoryDesc, shape: &[i64]) -> Result<MemoryDesc> {
        const CALL: &str = "dnnl_memory_desc_reshape";
        let d = dims(shape, CALL)?;
        let mut out = MemoryDesc::zeroed();
        // SAFETY: reads `md`, writes `out`.
        check(
            unsafe {
                (self.api.dnnl_memory_desc_reshape)(&mut out, md, shape.len() as c_int, d.as_ptr())
            },
            CALL,
        )?;
        Ok(out)
    }

    /// The same memory with its logical axes permuted (axis `i` becomes axis `perm[i]`).
    pub fn md_permute(&self, md: &MemoryDesc, perm: &[i32]) -> Result<MemoryDesc> {
        const CALL: &str = "dnnl_memory_desc_permute_axes";
        if perm.len() != self.md_ndims(md) {
            return Err(Error {
                status: sys::INVALID_ARGUMENTS,
                call: CALL,
            });
        }
        let mut out = MemoryDesc::zeroed();
        // SAFETY: `perm` has one entry per axis.
        check(
            unsafe { (self.api.dnnl_memory_desc_permute_axes)(&mut out, md, perm.as_ptr()) },
            CALL,
        )?;
        Ok(out)
    }

    /// The number of axes of a descriptor (its first field, `int ndims`).
    pub fn md_ndims(&self, md: &MemoryDesc) -> usize {
        let mut b = [0u8; 4];
        b.copy_from_slice(&md.0[..4]);
        usize::try_from(i32::from_ne_bytes(b)).unwrap_or(0)
    }

    /// Whether two descriptors describe the same layout.
    pub fn md_equal(&self, a: &MemoryDesc, b: &MemoryDesc) -> bool {
        // SAFETY: reads both.
        unsafe { (self.api.dnnl_memory_desc_equal)(a, b) != 0 }
    }

    /// The bytes a memory of this descriptor occupies (padding of blocked layouts included).
    pub fn md_size(&self, md: &MemoryDesc) -> usize {
        // SAFETY: reads `md`.
        unsafe { (self.api.dnnl_memory_desc_get_size)(md) }
    }

    /// A forward-inference convolution (or, with `transposed`, deconvolution).
    pub fn convolution(&self, c: &Convolution<'_>) -> Result<OpDesc> {
        let call = if c.transposed {
            "dnnl_dilated_deconvolution_forward_desc_init"
        } else {
            "dnnl_dilated_convolution_forward_desc_init"
        };
        let (s, d, l, r) = (
            dims(c.strides, call)?,
            dims(c.dilates, call)?,
            dims(c.pad_l, call)?,
            dims(c.pad_r, call)?,
        );
        let bias = c.bias.map_or(std::ptr::null(), |b| b as *const MemoryDesc);
        let (init, alg) = if c.transposed {
            (
                self.api.dnnl_dilated_deconvolution_forward_desc_init,
                sys::DECONVOLUTION_DIRECT,
            )
        } else {
            (
                self.api.dnnl_dilated_convolution_forward_desc_init,
                if c.winograd {
                    sys::CONVOLUTION_WINOGRAD
                } else {
                    sys::CONVOLUTION_DIRECT
                },
            )
        };
        OpDesc::new::<sys::ConvolutionDesc>("convolution", |p| {
            // SAFETY: `p` is a zeroed descriptor of the header's size; the dims arrays hold 12
            // entries; the bias may be null.
            check(
                unsafe {
                    init(
                        p,
                        sys::FORWARD_INFERENCE,
                        alg,
                        c.src,
                        c.weights,
                        bias,
                        c.dst,
                        s.as_ptr(),
                        d.as_ptr(),
                        l.as_ptr(),
                        r.as_ptr(),
                    )
                },
                call,
            )
        })
    }

    /// A forward-inference inner product: `dst{N, O} = src{N, I} · weights{O, I}ᵀ + bias{O}`.
    pub fn inner_product(
        &self,
        src: &MemoryDesc,
        weights: &MemoryDesc,
        bias: Option<&MemoryDesc>,
        dst: &MemoryDesc,
    ) -> Result<OpDesc> {
        let bias = bias.map_or(std::ptr::null(), |b| b as *const MemoryDesc);
        OpDesc::new::<sys::InnerProductDesc>("inner product", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe {
                    (self.api.dnnl_inner_product_forward_desc_init)(
                        p,
                        sys::FORWARD_INFERENCE,
                        src,
                        weights,
                        bias,
                        dst,
                    )
                },
                "dnnl_inner_product_forward_desc_init",
            )
        })
    }

    /// A matrix product `dst = src · weights + bias` (2-D or batched 3-D; transposes are
    /// strides of the descriptors; the bias broadcasts, e.g. `{1, N}`).
    pub fn matmul(
        &self,
        src: &MemoryDesc,
        weights: &MemoryDesc,
        bias: Option<&MemoryDesc>,
        dst: &MemoryDesc,
    ) -> Result<OpDesc> {
        let bias = bias.map_or(std::ptr::null(), |b| b as *const MemoryDesc);
        OpDesc::new::<sys::MatmulDesc>("matmul", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe { (self.api.dnnl_matmul_desc_init)(p, src, weights, bias, dst) },
                "dnnl_matmul_desc_init",
            )
        })
    }

    /// A forward-inference elementwise operation.
    pub fn eltwise(&self, alg: Alg, data: &MemoryDesc, alpha: f32, beta: f32) -> Result<OpDesc> {
        OpDesc::new::<sys::EltwiseDesc>("eltwise", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe {
                    (self.api.dnnl_eltwise_forward_desc_init)(
                        p,
                        sys::FORWARD_INFERENCE,
                        alg.0,
                        data,
                        alpha,
                        beta,
                    )
                },
                "dnnl_eltwise_forward_desc_init",
            )
        })
    }

    /// A forward-inference layer normalization over the last axis; `flags` of
    /// [`sys::USE_SCALE`], [`sys::USE_SHIFT`], [`sys::USE_GLOBAL_STATS`].
    pub fn layer_norm(&self, data: &MemoryDesc, epsilon: f32, flags: c_uint) -> Result<OpDesc> {
        OpDesc::new::<sys::LayerNormalizationDesc>("layer normalization", |p| {
            // SAFETY: as for `convolution`; a null statistics descriptor lets oneDNN derive it.
            check(
                unsafe {
                    (self.api.dnnl_layer_normalization_forward_desc_init)(
                        p,
                        sys::FORWARD_INFERENCE,
                        data,
                        std::ptr::null(),
                        epsilon,
                        flags,
                    )
                },
                "dnnl_layer_normalization_forward_desc_init",
            )
        })
    }

    /// A forward-inference batch normalization over axis 1; `flags` as for
    /// [`Dnnl::layer_norm`], plus [`sys::FUSE_NORM_RELU`].
    pub fn batch_norm(&self, data: &MemoryDesc, epsilon: f32, flags: c_uint) -> Result<OpDesc> {
        OpDesc::new::<sys::BatchNormalizationDesc>("batch normalization", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe {
                    (self.api.dnnl_batch_normalization_forward_desc_init)(
                        p,
                        sys::FORWARD_INFERENCE,
                        data,
                        epsilon,
                        flags,
                    )
                },
                "dnnl_batch_normalization_forward_desc_init",
            )
        })
    }

    /// A forward-inference softmax over `axis`.
    pub fn softmax(&self, data: &MemoryDesc, axis: usize) -> Result<OpDesc> {
        let axis = c_int::try_from(axis).unwrap_or(c_int::MAX);
        OpDesc::new::<sys::SoftmaxDesc>("softmax", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe {
                    (self.api.dnnl_softmax_forward_desc_init)(p, sys::FORWARD_INFERENCE, data, axis)
                },
                "dnnl_softmax_forward_desc_init",
            )
        })
    }

    /// A forward-inference pooling.
    #[allow(clippy::too_many_arguments)]
    pub fn pooling(
        &self,
        alg: Alg,
        src: &MemoryDesc,
        dst: &MemoryDesc,
        strides: &[i64],
        kernel: &[i64],
        pad_l: &[i64],
        pad_r: &[i64],
    ) -> Result<OpDesc> {
        const CALL: &str = "dnnl_pooling_forward_desc_init";
        let (s, k, l, r) = (
            dims(strides, CALL)?,
            dims(kernel, CALL)?,
            dims(pad_l, CALL)?,
            dims(pad_r, CALL)?,
        );
        OpDesc::new::<sys::PoolingDesc>("pooling", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe {
                    (self.api.dnnl_pooling_forward_desc_init)(
                        p,
                        sys::FORWARD_INFERENCE,
                        alg.0,
                        src,
                        dst,
                        s.as_ptr(),
                        k.as_ptr(),
                        l.as_ptr(),
                        r.as_ptr(),
                    )
                },
                CALL,
            )
        })
    }

    /// An elementwise binary operation `dst = src0 ∘ src1` (`src1` may broadcast).
    pub fn binary(
        &self,
        alg: Alg,
        src0: &MemoryDesc,
        src1: &MemoryDesc,
        dst: &MemoryDesc,
    ) -> Result<OpDesc> {
        OpDesc::new::<sys::BinaryDesc>("binary", |p| {
            // SAFETY: as for `convolution`.
            check(
                unsafe { (self.api.dnnl_binary_desc_init)(p, alg.0, src0, src1, dst) },
                "dnnl_binary_desc_init",
            )
        })
    }

    /// Empty post-ops.
    pub fn post_ops(&self) -> Result<PostOps> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle.
        check(
            unsafe { (self.api.dnnl_post_ops_create)(&mut raw) },
            "dnnl_post_ops_create",
        )?;
        Ok(PostOps {
            dnnl: self.clone(),
            raw,
        })
    }

    /// Default primitive attributes.
    pub fn attr(&self) -> Result<Attr> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle.
        check(
            unsafe { (self.api.dnnl_primitive_attr_create)(&mut raw) },
            "dnnl_primitive_attr_create",
        )?;
        Ok(Attr {
            dnnl: self.clone(),
            raw,
        })
    }
}

/// oneDNN on this machine: found or not, where, and its version.
pub fn availability() -> Availability {
    match Dnnl::shared() {
        Ok(d) => Availability {
            available: true,
            path: Some(d.path().to_path_buf()),
            version: Some(d.version().to_string()),
            error: None,
        },
        Err(e) => Availability::missing(&e),
    }
}

struct EngineHandle {
    dnnl: Dnnl,
    raw: Handle,
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_engine_create, destroyed once, after every object holding
        // this engine (they hold an `Arc` of it).
        unsafe { (self.dnnl.api.dnnl_engine_destroy)(self.raw) };
    }
}

/// A CPU engine; cheap to clone (the engine lives until its last user is dropped).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineHandle>,
}

// SAFETY: oneDNN engines may be used from any thread, concurrently.
unsafe impl Send for EngineHandle {}
// SAFETY: as above.
unsafe impl Sync for EngineHandle {}

impl Engine {
    /// The library.
    pub fn dnnl(&self) -> &Dnnl {
        &self.inner.dnnl
    }

    fn api(&self) -> &Api {
        &self.inner.dnnl.api
    }

    /// A stream to execute primitives on.
    pub fn stream(&self) -> Result<Stream> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle; the engine is alive.
        check(
            unsafe {
                (self.api().dnnl_stream_create)(&mut raw, self.inner.raw, sys::STREAM_DEFAULT_FLAGS)
            },
            "dnnl_stream_create",
        )?;
        Ok(Stream {
            engine: self.clone(),
            raw,
        })
    }
}

/// An execution stream.
pub struct Stream {
    engine: Engine,
    raw: Handle,
}

// SAFETY: a stream may move between threads; it is used by one thread at a time (not Sync).
unsafe impl Send for Stream {}

impl Stream {
    /// Waits for everything submitted to the stream.
    pub fn wait(&self) -> Result<()> {
        // SAFETY: the stream is alive.
        check(
            unsafe { (self.engine.api().dnnl_stream_wait)(self.raw) },
            "dnnl_stream_wait",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_stream_create, destroyed once.
        unsafe { (self.engine.api().dnnl_stream_destroy)(self.raw) };
    }
}

/// A memory object: a descriptor and a buffer, oneDNN's own or the caller's.
pub struct Memory {
    engine: Engine,
    raw: Handle,
    md: MemoryDesc,
    size: usize,
    owned: bool,
}

// SAFETY: a memory object may move between threads; it is not shared (not Sync).
unsafe impl Send for Memory {}

impl Memory {
    /// A memory object with a buffer oneDNN allocates (and frees) itself.
    pub fn allocate(engine: &Engine, md: &MemoryDesc) -> Result<Memory> {
        // DNNL_MEMORY_ALLOCATE is `(void *)(size_t)-1`.
        // SAFETY: asks oneDNN to allocate.
        unsafe { Memory::create(engine, md, usize::MAX as *mut c_void, true) }
    }

    /// A memory object over the caller's buffer (null: none yet; see [`Memory::set_handle`]).
    ///
    /// # Safety
    /// `ptr` must be null or point to at least `md_size(md)` bytes, suitably aligned, that stay
    /// valid (and are not accessed otherwise while a primitive runs on them) for as long as
    /// this object may be used with them.
    pub unsafe fn with_handle(
        engine: &Engine,
        md: &MemoryDesc,
        ptr: *mut c_void,
    ) -> Result<Memory> {
        Memory::create(engine, md, ptr, false)
    }

    unsafe fn create(
        engine: &Engine,
        md: &MemoryDesc,
        ptr: *mut c_void,
        owned: bool,
    ) -> Result<Memory> {
        let mut raw: Handle = std::ptr::null_mut();
        check(
            (engine.api().dnnl_memory_create)(&mut raw, md, engine.inner.raw, ptr),
            "dnnl_memory_create",
        )?;
        Ok(Memory {
            engine: engine.clone(),
            raw,
            md: *md,
            size: engine.dnnl().md_size(md),
            owned,
        })
    }

    /// Its descriptor.
    pub fn desc(&self) -> &MemoryDesc {
        &self.md
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Rebinds the object to another buffer.
    ///
    /// # Safety
    /// As for [`Memory::with_handle`].
    pub unsafe fn set_handle(&mut self, ptr: *mut c_void) -> Result<()> {
        check(
            (self.engine.api().dnnl_memory_set_data_handle)(self.raw, ptr),
            "dnnl_memory_set_data_handle",
        )?;
        self.owned = false;
        Ok(())
    }

    /// The buffer.
    pub fn handle(&self) -> Result<*mut c_void> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        check(
            unsafe { (self.engine.api().dnnl_memory_get_data_handle)(self.raw, &mut p) },
            "dnnl_memory_get_data_handle",
        )?;
        Ok(p)
    }

    /// The bytes of a buffer oneDNN allocated, as float32 values (in the memory's own layout,
    /// padding included).
    pub fn read_f32(&self) -> Result<Vec<f32>> {
        let p = self.owned_buffer("read_f32")?;
        let n = self.size / 4;
        // SAFETY: oneDNN allocated `size` bytes, suitably aligned for floats.
        Ok(unsafe { std::slice::from_raw_parts(p as *const f32, n) }.to_vec())
    }

    /// Writes float32 values into a buffer oneDNN allocated (at most its size).
    pub fn write_f32(&mut self, data: &[f32]) -> Result<()> {
        let p = self.owned_buffer("write_f32")?;
        if data.len() * 4 > self.size {
            return Err(Error {
                status: sys::INVALID_ARGUMENTS,
                call: "write_f32",
            });
        }
        // SAFETY: within the buffer oneDNN allocated; `&mut self` excludes other users.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p as *mut f32, data.len()) };
        Ok(())
    }

    fn owned_buffer(&self, call: &'static str) -> Result<*mut c_void> {
        let p = self.handle()?;
        if !self.owned || p.is_null() {
            return Err(Error {
                status: sys::INVALID_ARGUMENTS,
                call,
            });
        }
        Ok(p)
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_memory_create, destroyed once.
        unsafe { (self.engine.api().dnnl_memory_destroy)(self.raw) };
    }
}

/// A list of post-ops, applied in order to a primitive's result.
pub struct PostOps {
    dnnl: Dnnl,
    raw: Handle,
}

// SAFETY: owned by one thread at a time.
unsafe impl Send for PostOps {}

impl PostOps {
    /// `dst = scale · alg(dst; alpha, beta)`.
    pub fn eltwise(&mut self, alg: Alg, alpha: f32, beta: f32) -> Result<&mut PostOps> {
        // SAFETY: the post-ops are alive.
        check(
            unsafe {
                (self.dnnl.api.dnnl_post_ops_append_eltwise)(self.raw, 1.0, alg.0, alpha, beta)
            },
            "dnnl_post_ops_append_eltwise",
        )?;
        Ok(self)
    }

    /// `dst = result + scale · dst` (the destination's previous contents are added).
    pub fn sum(&mut self, scale: f32) -> Result<&mut PostOps> {
        // SAFETY: the post-ops are alive.
        check(
            unsafe { (self.dnnl.api.dnnl_post_ops_append_sum)(self.raw, scale) },
            "dnnl_post_ops_append_sum",
        )?;
        Ok(self)
    }

    /// `dst = dst ∘ src1` with a tensor of descriptor `src1` (passed at execution as
    /// `sys::arg_post_op(index) | sys::ARG_SRC_1`, `index` this post-op's position).
    pub fn binary(&mut self, alg: Alg, src1: &MemoryDesc) -> Result<&mut PostOps> {
        // SAFETY: the post-ops are alive; `src1` is read.
        check(
            unsafe { (self.dnnl.api.dnnl_post_ops_append_binary)(self.raw, alg.0, src1) },
            "dnnl_post_ops_append_binary",
        )?;
        Ok(self)
    }
}

impl Drop for PostOps {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_post_ops_create, destroyed once (attributes copy them).
        unsafe { (self.dnnl.api.dnnl_post_ops_destroy)(self.raw) };
    }
}

/// Primitive attributes.
pub struct Attr {
    dnnl: Dnnl,
    raw: Handle,
}

// SAFETY: owned by one thread at a time.
unsafe impl Send for Attr {}

impl Attr {
    /// Attaches (a copy of) post-ops.
    pub fn set_post_ops(&mut self, post_ops: &PostOps) -> Result<()> {
        // SAFETY: both alive; oneDNN copies the post-ops.
        check(
            unsafe { (self.dnnl.api.dnnl_primitive_attr_set_post_ops)(self.raw, post_ops.raw) },
            "dnnl_primitive_attr_set_post_ops",
        )
    }

    /// The caller provides the scratchpad at execution (`sys::ARG_SCRATCHPAD`, of the
    /// primitive descriptor's [`PrimitiveDesc::scratchpad_md`]).
    pub fn set_user_scratchpad(&mut self) -> Result<()> {
        // SAFETY: the attributes are alive.
        check(
            unsafe {
                (self.dnnl.api.dnnl_primitive_attr_set_scratchpad_mode)(
                    self.raw,
                    sys::SCRATCHPAD_MODE_USER,
                )
            },
            "dnnl_primitive_attr_set_scratchpad_mode",
        )
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_primitive_attr_create, destroyed once.
        unsafe { (self.dnnl.api.dnnl_primitive_attr_destroy)(self.raw) };
    }
}

/// A primitive descriptor: the implementation oneDNN chose and the layouts it wants.
pub struct PrimitiveDesc {
    engine: Engine,
    raw: Handle,
}

// SAFETY: queries and primitive creation may come from any thread.
unsafe impl Send for PrimitiveDesc {}
// SAFETY: as above.
unsafe impl Sync for PrimitiveDesc {}

impl PrimitiveDesc {
    /// The primitive descriptor of an operation on `engine`, with optional attributes. An
    /// operation oneDNN cannot run here is an [`Error`] for which [`Error::is_unsupported`].
    pub fn new(engine: &Engine, op: &OpDesc, attr: Option<&Attr>) -> Result<PrimitiveDesc> {
        let mut raw: Handle = std::ptr::null_mut();
        let attr = attr.map_or(std::ptr::null_mut(), |a| a.raw);
        // SAFETY: the descriptor was filled by its `*_init` function; attributes may be null.
        check(
            unsafe {
                (engine.api().dnnl_primitive_desc_create)(
                    &mut raw,
                    op.as_ptr(),
                    attr,
                    engine.inner.raw,
                    std::ptr::null_mut(),
                )
            },
            "dnnl_primitive_desc_create",
        )?;
        Ok(PrimitiveDesc {
            engine: engine.clone(),
            raw,
        })
    }

    /// A reorder from one layout to another on `engine`.
    pub fn reorder(engine: &Engine, from: &MemoryDesc, to: &MemoryDesc) -> Result<PrimitiveDesc> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: reads both descriptors.
        check(
            unsafe {
                (engine.api().dnnl_reorder_primitive_desc_create)(
                    &mut raw,
                    from,
                    engine.inner.raw,
                    to,
                    engine.inner.raw,
                    std::ptr::null_mut(),
                )
            },
            "dnnl_reorder_primitive_desc_create",
        )?;
        Ok(PrimitiveDesc {
            engine: engine.clone(),
            raw,
        })
    }

    /// The descriptor answering a `dnnl_query_*_md` query, if the primitive has one.
    pub fn query_md(&self, what: c_int, index: usize) -> Option<MemoryDesc> {
        let index = c_int::try_from(index).ok()?;
        // SAFETY: returns null or a pointer into the primitive descriptor, copied at once.
        let p = unsafe { (self.engine.api().dnnl_primitive_desc_query_md)(self.raw, what, index) };
        if p.is_null() {
            return None;
        }
        let md = unsafe { *p };
        // A zero-dimensional descriptor is oneDNN's "none".
        (self.engine.dnnl().md_ndims(&md) > 0).then_some(md)
    }

    /// The source layout it chose.
    pub fn src_md(&self) -> Option<MemoryDesc> {
        self.query_md(sys::QUERY_SRC_MD, 0)
    }

    /// The weights layout it chose (`index` 1: the bias).
    pub fn weights_md(&self, index: usize) -> Option<MemoryDesc> {
        self.query_md(sys::QUERY_WEIGHTS_MD, index)
    }

    /// The destination layout it chose.
    pub fn dst_md(&self) -> Option<MemoryDesc> {
        self.query_md(sys::QUERY_DST_MD, 0)
    }

    /// The scratchpad it needs (with a user scratchpad), if any.
    pub fn scratchpad_md(&self) -> Option<MemoryDesc> {
        self.query_md(sys::QUERY_SCRATCHPAD_MD, 0)
    }

    /// The implementation's name: `brg:avx512_core`, `jit:avx512_core`, `x64:gemm:jit`, ...
    pub fn impl_info(&self) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: writes a pointer to a string owned by the primitive descriptor.
        let status = unsafe {
            (self.engine.api().dnnl_primitive_desc_query)(
                self.raw,
                sys::QUERY_IMPL_INFO_STR,
                0,
                &mut p as *mut *const c_char as *mut c_void,
            )
        };
        if status != sys::SUCCESS {
            return String::new();
        }
        unsafe { super::c_str(p) }.unwrap_or_default()
    }

    /// The primitive (JIT-compiling its kernel).
    pub fn primitive(&self) -> Result<Primitive> {
        let mut raw: Handle = std::ptr::null_mut();
        // SAFETY: writes one handle.
        check(
            unsafe { (self.engine.api().dnnl_primitive_create)(&mut raw, self.raw) },
            "dnnl_primitive_create",
        )?;
        Ok(Primitive {
            engine: self.engine.clone(),
            raw,
        })
    }
}

impl Drop for PrimitiveDesc {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_*primitive_desc_create, destroyed once.
        unsafe { (self.engine.api().dnnl_primitive_desc_destroy)(self.raw) };
    }
}

/// A primitive, ready to execute many times.
pub struct Primitive {
    engine: Engine,
    raw: Handle,
}

// SAFETY: oneDNN primitives may be executed from several threads at once (each with its own
// stream and scratchpad).
unsafe impl Send for Primitive {}
// SAFETY: as above.
unsafe impl Sync for Primitive {}

impl Primitive {
    /// Submits the primitive to `stream` with its arguments (`sys::ARG_*`, memory); call
    /// [`Stream::wait`] before reading the results.
    pub fn execute(&self, stream: &Stream, args: &[(c_int, &Memory)]) -> Result<()> {
        let raw: Vec<sys::ExecArg> = args
            .iter()
            .map(|&(arg, m)| sys::ExecArg { arg, memory: m.raw })
            .collect();
        let n = c_int::try_from(raw.len()).unwrap_or(c_int::MAX);
        // SAFETY: every memory is alive for the call; the arguments array has `n` entries.
        check(
            unsafe {
                (self.engine.api().dnnl_primitive_execute)(self.raw, stream.raw, n, raw.as_ptr())
            },
            "dnnl_primitive_execute",
        )
    }

    /// [`Primitive::execute`], then [`Stream::wait`].
    pub fn run(&self, stream: &Stream, args: &[(c_int, &Memory)]) -> Result<()> {
        self.execute(stream, args)?;
        stream.wait()
    }
}

impl Drop for Primitive {
    fn drop(&mut self) {
        // SAFETY: created by dnnl_primitive_create, destroyed once.
        unsafe { (self.engine.api().dnnl_primitive_destroy)(self.raw) };
    }
}

#[cfg(test)]
mod tests;
