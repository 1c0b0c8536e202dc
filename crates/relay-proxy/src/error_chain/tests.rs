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
