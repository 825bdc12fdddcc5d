//! The data model: an arena of the values a pickle makes, referring to each other
//! by [`NodeId`], so the memo and shared references cost O(1) and dropping the
//! arena is flat, however deep the structure. It depends on nothing but the error
//! and limit types; a [`Domain`] (torch's, in `crate::torch`) adds its own kinds.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

mod arena;
pub mod compact;
pub mod keys;
mod node;

pub use arena::Arena;
pub use node::{
    Constructor, DictClass, DictId, DictNode, Domain, Mutation, Node, NodeId, ObjectNode, SetNode,
    Span,
};
