//! The data model: an arena of the values a pickle makes, referring to each other
//! by [`NodeId`], so the memo and shared references cost O(1) and dropping the
//! arena is flat, however deep the structure. It depends on nothing but the error
//! and limit types; a [`Domain`] (torch's, in `crate::torch`) adds its own kinds.

mod arena;
pub mod compact;
pub mod keys;
mod node;
pub mod refs;

pub use arena::Arena;
pub use node::{
    Constructor, DictClass, DictId, DictNode, Domain, Mutation, Node, NodeId, ObjectNode, SetNode,
    Span,
};
