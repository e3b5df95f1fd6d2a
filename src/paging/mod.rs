//! Continuation addresses (`output.json#<stream>@<offset>`) and the pages they name (CONTRACT §5).
//!
//! litany's `read_tool_output` answers an address with a page: up to
//! [`PAGE_BYTES`] of one stream of a tool capture, plus a banner line on
//! stderr. This module gives the same answer, byte for byte, without
//! FUSE and without holding whole captures in memory:
//! - [`address`]: the grammar, parsed once for full addresses and for the
//!   page file names the mount shows.
//! - [`banner`]: the banner line and the next-page address.
//!
//! Everything here is plain Rust; the filesystem layer does the I/O.

pub mod address;
pub mod banner;

pub use address::{
    Address, AddressError, Malformation, PAGE_BYTES, PageName, RecordPath, Stream, parse_page_name,
};
pub use banner::{banner, next_address};

#[cfg(test)]
mod tests;
