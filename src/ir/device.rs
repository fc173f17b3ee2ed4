//! Virtual devices: where a value lives and how code for it is compiled.
//!
//! A [`VirtualDevice`] has four independently optional fields (device type, virtual device id,
//! target, memory scope). Unset fields are unconstrained. Two devices *join* when they agree on
//! every field both set; *defaulting* fills only the unset fields; `a` *refines* `b` when `a` sets
//! at least the fields `b` sets, with the same values.

use std::fmt;

/// DLPack device type codes and their names, as TVM numbers them.
pub const DEVICE_TYPES: &[(i32, &str)] = &[
    (1, "cpu"),
    (2, "cuda"),
    (3, "cuda_host"),
    (4, "opencl"),
    (7, "vulkan"),
    (8, "metal"),
    (9, "vpi"),
    (10, "rocm"),
    (11, "rocm_host"),
    (12, "ext_dev"),
    (13, "cuda_managed"),
    (14, "oneapi"),
    (15, "webgpu"),
    (16, "hexagon"),
];

/// The name of a device type code, if it has one.
pub fn device_type_name(code: i32) -> Option<&'static str> {
    DEVICE_TYPES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
}

/// The code of a device type name (`"cpu"`, `"cuda"`, ...; `"llvm"` is accepted for `cpu`).
pub fn device_type_code(name: &str) -> Option<i32> {
    if name == "llvm" {
        return Some(1);
    }
    DEVICE_TYPES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(c, _)| *c)
}

/// A (possibly partial) virtual device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VirtualDevice {
    /// DLPack device type code (1 = cpu, 2 = cuda, ...).
    pub device_type: Option<i32>,
    /// Distinguishes several devices of the same type.
    pub virtual_device_id: Option<i32>,
    /// The target that compiles code for the device, e.g. `"cuda"` or `"llvm"`.
    pub target: Option<String>,
    /// An uninterpreted memory-area label.
    pub memory_scope: Option<String>,
}

impl VirtualDevice {
    /// The fully unconstrained device.
    pub fn unconstrained() -> VirtualDevice {
        VirtualDevice::default()
    }

    /// A device of the given type and id, with no target or scope.
    pub fn for_device(device_type: i32, id: i32) -> VirtualDevice {
        VirtualDevice {
            device_type: Some(device_type),
            virtual_device_id: Some(id),
            ..VirtualDevice::default()
        }
    }

    /// Whether no field is set.
    pub fn is_unconstrained(&self) -> bool {
        *self == VirtualDevice::default()
    }

    /// The join: `None` when a field set on both sides differs, else the union of set fields.
    pub fn join(&self, other: &VirtualDevice) -> Option<VirtualDevice> {
        fn pick<T: Clone + PartialEq>(a: &Option<T>, b: &Option<T>) -> Result<Option<T>, ()> {
            match (a, b) {
                (Some(x), Some(y)) if x != y => Err(()),
                (Some(x), _) => Ok(Some(x.clone())),
                (None, y) => Ok(y.clone()),
            }
        }
        Some(VirtualDevice {
            device_type: pick(&self.device_type, &other.device_type).ok()?,
            virtual_device_id: pick(&self.virtual_device_id, &other.virtual_device_id).ok()?,
            target: pick(&self.target, &other.target).ok()?,
            memory_scope: pick(&self.memory_scope, &other.memory_scope).ok()?,
        })
    }

    /// Fills the fields `self` leaves unset from `other`. The target is taken only when the
    /// resulting device types agree.
    pub fn default_from(&self, other: &VirtualDevice) -> VirtualDevice {
        let device_type = self.device_type.or(other.device_type);
        let target = match (&self.target, &other.target) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(t)) if device_type == other.device_type => Some(t.clone()),
            _ => None,
        };
        VirtualDevice {
            device_type,
            virtual_device_id: self.virtual_device_id.or(other.virtual_device_id),
            target,
            memory_scope: self.memory_scope.clone().or(other.memory_scope.clone()),
        }
    }

    /// Whether `self` sets at least the fields `other` sets, with the same values.
    pub fn refines(&self, other: &VirtualDevice) -> bool {
        fn ok<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            b.is_none() || a == b
        }
        ok(&self.device_type, &other.device_type)
            && ok(&self.virtual_device_id, &other.virtual_device_id)
            && ok(&self.target, &other.target)
            && ok(&self.memory_scope, &other.memory_scope)
    }
}

/// Prints the inline literal form, e.g.
/// `VirtualDevice(device="cuda", id=0, target="cuda", scope="global")`.
impl fmt::Display for VirtualDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("VirtualDevice(")?;
        let mut sep = "";
        if let Some(t) = self.device_type {
            match device_type_name(t) {
                Some(n) => write!(f, "device=\"{n}\"")?,
                None => write!(f, "device={t}")?,
            }
            sep = ", ";
        }
        if let Some(id) = self.virtual_device_id {
            write!(f, "{sep}id={id}")?;
            sep = ", ";
        }
        if let Some(t) = &self.target {
            write!(f, "{sep}target=")?;
            crate::ir::write_escaped(f, t)?;
            sep = ", ";
        }
        if let Some(s) = &self.memory_scope {
            write!(f, "{sep}scope=")?;
            crate::ir::write_escaped(f, s)?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vd(t: Option<i32>, id: Option<i32>, target: Option<&str>, s: Option<&str>) -> VirtualDevice {
        VirtualDevice {
            device_type: t,
            virtual_device_id: id,
            target: target.map(str::to_string),
            memory_scope: s.map(str::to_string),
        }
    }

    #[test]
    fn join_takes_union_or_fails_on_clash() {
        let a = vd(Some(1), None, Some("llvm"), None);
        let b = vd(None, Some(3), None, Some("global"));
        assert_eq!(
            a.join(&b),
            Some(vd(Some(1), Some(3), Some("llvm"), Some("global")))
        );
        let c = vd(None, None, None, Some("local"));
        assert_eq!(b.join(&c), None);
    }

    #[test]
    fn default_keeps_set_fields_and_guards_target() {
        let a = vd(Some(2), None, None, None);
        let b = vd(Some(1), Some(0), Some("llvm"), None);
        assert_eq!(a.default_from(&b), vd(Some(2), Some(0), None, None));
        let c = vd(None, None, None, None);
        assert_eq!(c.default_from(&b), b);
    }

    #[test]
    fn refinement_is_field_inclusion() {
        let a = vd(Some(2), Some(0), Some("cuda"), None);
        assert!(a.refines(&vd(Some(2), None, None, None)));
        assert!(a.refines(&VirtualDevice::unconstrained()));
        assert!(!vd(Some(2), None, None, None).refines(&a));
    }

    #[test]
    fn prints_inline_literal() {
        let a = vd(Some(2), Some(0), Some("cuda"), Some("global"));
        assert_eq!(
            a.to_string(),
            r#"VirtualDevice(device="cuda", id=0, target="cuda", scope="global")"#
        );
        assert_eq!(
            VirtualDevice::unconstrained().to_string(),
            "VirtualDevice()"
        );
    }
}
