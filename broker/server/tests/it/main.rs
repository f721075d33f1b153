//! The broker over real sockets, in one test binary: each file below was a binary of its own,
//! and each linked and optimised the whole server again (about a minute of CPU apiece in a
//! release build).

// The tests' futures hold a whole server's start (Server::bind) a few levels down: computing
// their layout goes deeper than the default limit of 128 queries.
#![recursion_limit = "256"]

mod bad_input;
mod common;
mod sasl;
mod topics;
