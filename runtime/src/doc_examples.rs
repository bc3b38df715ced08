//! The documentation's Rust examples, compiled and run as doctests
//! (`cargo test --doc -p polylock`) against the servers of `scripts/services`,
//! so a renamed method breaks the test suite rather than the docs. Every
//! Markdown page with a ```rust block is listed here; a block that is not a
//! whole program is marked ```rust,ignore with a `<!-- fragment: reason -->`
//! before it. The Python, Node and Java examples have their own extractors
//! in each binding's suite (test_doc_examples.py, doc-examples.test.mjs,
//! DocExamplesTest.java).

#[doc = include_str!("../../README.md")]
pub struct Readme;

#[doc = include_str!("../../docs/rust.md")]
pub struct RustGuide;
