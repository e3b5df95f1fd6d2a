//! The position line `read_tool_output` writes to stderr with every page.
//!
//! The line always has the same shape. The range is `offset-end` with
//! `end` exclusive (`end = offset + page length`), so one page's `end`
//! is the next page's offset. The line then either names the next
//! address or says `end of stream`. It never leaves the clause out,
//! because the tool exists to be paged to the end.
//!
//! The text here is the tool's, byte for byte, including the trailing
//! newline. The record is printed as the address spelled it, and for any
//! address [`Address::parse`](super::Address::parse) accepts, that is its
//! canonical rendering.

use super::address::Address;

/// The address that continues after a page of `address` ending at `end`,
/// or `None` when `end` has reached `total`.
pub(crate) fn next_address(address: &Address, end: u64, total: u64) -> Option<Address> {
    (end < total).then(|| address.moved_to(end))
}

/// The stderr line for a page of `address` that ends at `end`
/// (exclusive) in a stream of `total` bytes, with the tool's trailing
/// `\n`.
pub(crate) fn banner(address: &Address, end: u64, total: u64) -> String {
    let rest = match next_address(address, end, total) {
        Some(next) => format!("continue with address {next}"),
        None => "end of stream".to_string(),
    };
    format!(
        "read_tool_output: bytes {}-{end} of {total} from {} {}; {rest}\n",
        address.offset, address.record, address.stream
    )
}
