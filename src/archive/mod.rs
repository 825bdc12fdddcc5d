//! Finding a checkpoint's records in its bytes: the zip reader, the torch layout
//! over it, DEFLATE, the model of CPython's `tarfile` (which torch.load tries on
//! every file first), and the memory map.

pub mod decompress;
pub mod entry_name;
pub mod inflate;
pub mod method;
pub mod npy;
pub mod sevenzip;
pub mod source;
pub mod streams;
pub mod tar;
pub mod zip;
