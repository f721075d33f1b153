//! The broker over real sockets, in one test binary: each file below was a binary of its own,
//! and each linked and optimised the whole server again (about a minute of CPU apiece in a
//! release build).

mod bad_input;
mod common;
mod sasl;
mod topics;
