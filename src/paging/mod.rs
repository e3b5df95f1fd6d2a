//! Continuation addresses (`output.json#<stream>@<offset>`) and the pages they name (CONTRACT §5).
//!
//! litany's `read_tool_output` answers an address with a page: up to
//! [`PAGE_BYTES`] of one stream of a tool capture, plus a banner line on
//! stderr. This module gives the same answer, byte for byte, without
//! FUSE and without holding whole captures in memory:
//! - [`address`]: the grammar, parsed once for full addresses and for the
//!   page file names the mount shows.
//! - [`banner`](mod@banner): the banner line and the next-page address.
//! - [`reader`]: a byte-budgeted cache of per-capture indexes, and page
//!   reads served from them. The first read of a capture parses it once,
//!   accepting exactly what litany's serde parse accepts (the private
//!   `scan` module), and later reads decode only from the nearest
//!   checkpoint.
//!
//! Everything here is plain Rust over `&std::fs::File`. The filesystem
//! layer opens files, chooses keys and maps [`PageError::errno`].

pub(crate) mod address;
pub(crate) mod banner;
pub(crate) mod reader;
pub(crate) mod scan;
mod source;

pub use address::{
    Address, AddressError, Malformation, PAGE_BYTES, PageName, RecordPath, Stream, parse_page_name,
};
pub use reader::{CHECKPOINT_BYTES, CaptureKey, Page, PageCache, PageError};

#[cfg(test)]
mod tests;
