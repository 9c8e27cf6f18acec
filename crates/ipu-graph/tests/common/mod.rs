//! What the graph test suites share.

#![allow(dead_code)]

use expect_test::Expect;

/// Asserts that parsing `text` fails with the message `expect`.
pub fn check_error(text: &str, expect: Expect) {
    let err = ipu_graph::parse(text, "bad.ipug").expect_err("the text is invalid");
    expect.assert_eq(&err.to_string());
}
