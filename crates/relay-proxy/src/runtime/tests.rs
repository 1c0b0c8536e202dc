use std::num::NonZeroUsize;

use super::threads;

const TWO: NonZeroUsize = NonZeroUsize::new(2).unwrap();

#[test]
fn one_thread_per_usable_cpu_up_to_the_cap() {
    assert_eq!(threads(None, TWO), 2);
    assert_eq!(threads(NonZeroUsize::new(1), TWO), 1);
    assert_eq!(threads(NonZeroUsize::new(2), TWO), 2);
    assert_eq!(threads(NonZeroUsize::new(64), TWO), 2);
    assert_eq!(threads(NonZeroUsize::new(64), NonZeroUsize::MAX), 64);
    assert_eq!(threads(NonZeroUsize::new(1), NonZeroUsize::MAX), 1);
}
