use super::*;

fn route(name: u8) -> Pool {
    Pool::Route(Fingerprint([name; 32]))
}

#[test]
fn a_full_unbound_pool_leaves_every_route_its_own_budget() {
    let waiting = Arc::new(Waiting::default());
    let flood: Vec<_> = std::iter::from_fn(|| waiting.try_take(Pool::Unbound))
        .take(10_000)
        .collect();
    assert_eq!(flood.len(), MAX_WAITING_UNBOUND);
    let victim: Vec<_> = std::iter::from_fn(|| waiting.try_take(route(b'A')))
        .take(10_000)
        .collect();
    assert_eq!(victim.len(), MAX_WAITING_PER_ROUTE);
    assert!(
        waiting.try_take(route(b'B')).is_some(),
        "another route still waits"
    );
}

#[test]
fn a_route_filling_its_budget_takes_nothing_from_another() {
    let waiting = Arc::new(Waiting::default());
    let a: Vec<_> = (0..MAX_WAITING_PER_ROUTE)
        .filter_map(|_| waiting.try_take(route(b'A')))
        .collect();
    assert_eq!(a.len(), MAX_WAITING_PER_ROUTE);
    assert!(waiting.try_take(route(b'A')).is_none());
    assert!(waiting.try_take(route(b'B')).is_some());
    assert!(waiting.try_take(Pool::Unbound).is_some());
}

#[test]
fn a_dropped_permit_gives_its_place_back_and_empty_pools_are_forgotten() {
    let waiting = Arc::new(Waiting::default());
    let held: Vec<_> = (0..MAX_WAITING_UNBOUND)
        .filter_map(|_| waiting.try_take(Pool::Unbound))
        .collect();
    assert!(waiting.try_take(Pool::Unbound).is_none());
    drop(held);
    assert_eq!(waiting.count(Pool::Unbound), 0);
    assert!(relay_logging::sync::lock(&waiting.counts, "test").is_some_and(|c| c.is_empty()));
    assert!(waiting.try_take(Pool::Unbound).is_some());
}
