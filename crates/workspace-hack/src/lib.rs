//! Feature pins, no code: see this crate's Cargo.toml.
