use super::*;

#[derive(Debug, thiserror::Error)]
#[error("cannot write state.json")]
struct Outer(#[source] Middle);

#[derive(Debug, thiserror::Error)]
#[error("rename failed")]
struct Middle(#[source] std::io::Error);

#[test]
fn every_cause_follows_on_the_same_line() {
    let error = Outer(Middle(std::io::Error::other("disk full\nretry later")));
    assert_eq!(
        error_chain(&error),
        "cannot write state.json: rename failed: disk full retry later"
    );
    assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read /etc/ca.pem: {0}")]
struct Quoting(#[source] Middle);

/// An error that quotes its cause in its own text does not have it said again, nor that
/// cause's own, which it quoted too.
#[test]
fn a_cause_the_error_before_it_quotes_is_not_repeated() {
    let error = Quoting(Middle(std::io::Error::other("rename failed")));
    assert_eq!(
        error_chain(&error),
        "cannot read /etc/ca.pem: rename failed"
    );
    let error = Outer(Middle(std::io::Error::other("rename failed")));
    assert_eq!(
        error_chain(&error),
        "cannot write state.json: rename failed"
    );
}
