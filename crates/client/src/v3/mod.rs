//! NFSv3 (RFC 1813): the [`Client`] with a typed call for every procedure ([`client`]), its
//! directory pages ([`dir`]), and the [`crate::Namespace`] and [`crate::OpenFile`] calls over
//! it (`namespace.rs`).

pub mod client;
pub mod dir;
mod namespace;

pub use client::{list_exports, Client, DirEntry, ExportInfo, IntoNfsUrl, Pending};
pub use dir::DirPages;
pub use namespace::{attr_of, sattr3};
