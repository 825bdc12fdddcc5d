//! Print a checkpoint's tensors, with no Python involved:
//!
//!     cargo run --example load -- model.pt
//!
//! One line per tensor: its state-dict name, dtype, shape, stride, byte count
//! and the CRC-32 of its bytes (row-major, this machine's byte order).

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: load FILE");
        return ExitCode::from(2);
    };
    let checkpoint = match tensorplay::open(&path) {
        Ok(checkpoint) => checkpoint,
        Err(e) => {
            eprintln!("{}: {e}", path.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    println!("format {}", checkpoint.format());
    for (name, tensor) in checkpoint.tensors() {
        let bytes = match tensor.bytes() {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("{name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!(
            "{name} {} {:?} {:?} {} {:08x}",
            tensor.dtype(),
            tensor.shape(),
            tensor.stride(),
            bytes.len(),
            crc32fast::hash(&bytes)
        );
    }
    ExitCode::SUCCESS
}
