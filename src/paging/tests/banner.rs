//! The banner line, against the lines CONTRACT §5.3 recorded from a
//! real run.

use crate::paging::address::Address;
use crate::paging::banner::{banner, next_address};

const RECORD: &str = "steps/20261202T094226Z-0122ccc2/001/tools/toolu_fake1/output.json";

fn at(offset: u64) -> Address {
    Address::parse(&format!("{RECORD}#stdout@{offset}")).expect("grammar")
}

#[test]
fn a_middle_page_names_the_next_address() {
    let a = at(2048);
    assert_eq!(
        banner(&a, 6144, 13893),
        format!(
            "read_tool_output: bytes 2048-6144 of 13893 from {RECORD} stdout; \
             continue with address {RECORD}#stdout@6144\n"
        )
    );
    assert_eq!(next_address(&a, 6144, 13893), Some(at(6144)));
}

#[test]
fn the_last_page_and_the_empty_page_say_end_of_stream() {
    assert_eq!(
        banner(&at(12288), 13893, 13893),
        format!(
            "read_tool_output: bytes 12288-13893 of 13893 from {RECORD} stdout; end of stream\n"
        )
    );
    assert_eq!(
        banner(&at(13893), 13893, 13893),
        format!(
            "read_tool_output: bytes 13893-13893 of 13893 from {RECORD} stdout; end of stream\n"
        )
    );
    assert_eq!(next_address(&at(13893), 13893, 13893), None);
    let empty = Address::parse(&format!("{RECORD}#stderr@0")).expect("grammar");
    assert_eq!(
        banner(&empty, 0, 0),
        format!("read_tool_output: bytes 0-0 of 0 from {RECORD} stderr; end of stream\n")
    );
}

#[test]
fn an_alias_offset_is_printed_as_its_value() {
    // `@+5` is legal; the tool prints the parsed number.
    let a = Address::parse(&format!("{RECORD}#stdout@+5")).expect("grammar");
    assert_eq!(
        banner(&a, 4101, 7000),
        format!(
            "read_tool_output: bytes 5-4101 of 7000 from {RECORD} stdout; \
             continue with address {RECORD}#stdout@4101\n"
        )
    );
}
