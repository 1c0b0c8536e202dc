use std::num::NonZeroUsize;

use super::runtime_threads;

#[test]
fn one_thread_per_usable_cpu_up_to_two() {
    assert_eq!(runtime_threads(None), 2);
    assert_eq!(runtime_threads(NonZeroUsize::new(1)), 1);
    assert_eq!(runtime_threads(NonZeroUsize::new(2)), 2);
    assert_eq!(runtime_threads(NonZeroUsize::new(64)), 2);
}
