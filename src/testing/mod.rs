//! Support for the tests, unit and integration alike (hidden from the API docs, like
//! the fixture): what a test needs from the machine ([`prereq`]), and waiting for a
//! condition instead of sleeping for a guess at how long it takes ([`wait`]).

pub mod prereq;
pub mod wait;
