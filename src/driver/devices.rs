//! `collage plan-devices MODEL [--minimal|--complete] [--default-device DEV] [--tvm-compat]`.

use super::{load_model, report, Outcome};
use crate::analysis::devices::plan_devices;
use crate::frontend::relay::print::{print_module_with, print_module_with_devices, PrintOptions};
use crate::ir::device::device_type_code;
use crate::ir::VirtualDevice;
use crate::source::SourceMap;
use std::path::Path;

/// Which representation `plan-devices` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceForm {
    /// Devices on binders and function results only, plus the copies.
    Minimal,
    /// The minimal form with the device of every printed expression in its comment.
    Complete,
}

/// Parses a device name for `--default-device`: `cpu`, `cuda`, `cuda(1)` or `cuda:1` (the id
/// defaults to 0).
pub fn parse_device_arg(text: &str) -> Option<VirtualDevice> {
    let text = text.trim();
    let (name, id) = if let Some((n, rest)) = text.split_once('(') {
        (n, rest.strip_suffix(')')?.trim().parse::<i32>().ok()?)
    } else if let Some((n, id)) = text.split_once(':') {
        (n, id.trim().parse::<i32>().ok()?)
    } else {
        (text, 0)
    };
    if id < 0 {
        return None;
    }
    Some(VirtualDevice::for_device(
        device_type_code(name.trim())?,
        id,
    ))
}

/// Plans the devices of a model and prints the planned module.
pub fn plan_devices_command(
    path: &Path,
    model_options: &crate::pipeline::load::ModelOptions,
    form: DeviceForm,
    default: &VirtualDevice,
    opts: PrintOptions,
) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path, model_options) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let plan = match plan_devices(&m, default) {
        Ok(p) => p,
        Err(diags) => {
            report(&diags, &sources);
            return Outcome::InputErrors;
        }
    };
    let text = match form {
        DeviceForm::Minimal => print_module_with(&plan.module, opts),
        DeviceForm::Complete => print_module_with_devices(&plan.module, opts, &plan.devices),
    };
    super::written(super::out(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_arguments() {
        assert_eq!(
            parse_device_arg("cpu"),
            Some(VirtualDevice::for_device(1, 0))
        );
        assert_eq!(
            parse_device_arg("cuda(1)"),
            Some(VirtualDevice::for_device(2, 1))
        );
        assert_eq!(
            parse_device_arg("cuda:2"),
            Some(VirtualDevice::for_device(2, 2))
        );
        assert_eq!(parse_device_arg("tpu"), None);
        assert_eq!(parse_device_arg("cuda(-1)"), None);
    }
}
