//! How each backend makes what only it knows: tensors, storages, and torch's
//! other kinds of value (dtypes, sizes, devices, layouts, classes). The builder
//! builds Python's own values and asks these for the rest, through its
//! [`Tensors`] trait.

mod inspect;
mod numpy;
mod torch;

pub use crate::build::Tensors;
pub use inspect::InspectTensors;
pub use numpy::NumpyTensors;
pub use torch::TorchTensors;
