use std::sync::{Arc, Mutex};

use super::lock;

#[test]
fn a_healthy_lock_is_taken() {
    let mutex = Mutex::new(3);
    assert_eq!(lock(&mutex, "test").map(|guard| *guard), Some(3));
}

#[test]
fn a_poisoned_lock_fails_closed_every_time() {
    let mutex = Arc::new(Mutex::new(0u32));
    let poisoner = Arc::clone(&mutex);
    let panicked = std::thread::spawn(move || {
        let _guard = lock(&poisoner, "test");
        panic!("poison the lock");
    })
    .join();
    assert!(panicked.is_err());
    assert!(lock(&mutex, "test").is_none());
    assert!(lock(&mutex, "test").is_none());
}
