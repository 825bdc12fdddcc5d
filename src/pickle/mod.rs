//! A pickle VM for untrusted input: protocols 0 to 5, values in an arena, every
//! opcode charged against [`crate::Limits`], and no import or call of anything.

pub mod cursor;
pub mod decoder;
pub mod machine;
pub mod opcodes;
pub mod text;
