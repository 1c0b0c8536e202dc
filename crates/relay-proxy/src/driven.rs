//! The waker of an HTTP/1.1 connection that a request's own task drives (see
//! [`crate::upstream::Lease`]), which keeps that task from waking itself for nothing.
//!
//! hyper's connection and the response it reads are two ends of channels: a response head
//! goes through a one-shot channel, each chunk of its body through a channel of one place.
//! Between two tasks each hand-over wakes the other end. Driven by the request's task, both
//! ends are polled by that task one after the other, so every hand-over woke the task that
//! was running it, and tokio then polled the whole connection to the client once more for
//! nothing: once for the head of every answer, and once for every chunk of a streamed one.
//!
//! So the connection is polled with a waker of its own, which wakes the task unless the
//! task is taking what the connection handed over at that moment (taking a chunk frees the
//! channel's place, which wakes the connection); and the receiving ends are polled with no
//! waker at all, since only the connection, polled by the same task just before, can fill
//! them ([`DriverWaker::take`]).
//!
//! And, as a task is, the connection is polled only when something woke it since its last
//! poll ([`DriverWaker::poll`]): hyper's server polls a response body two or three times
//! for each chunk it writes, and the connection, polled again after it has said it waits
//! for its socket, would only look once more and find nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// Polls a connection on behalf of the task that drives it; see the module's text.
pub(crate) struct DriverWaker {
    shared: Arc<Shared>,
    /// A waker of `shared`, made once.
    waker: Waker,
}

struct Shared {
    /// The task that last polled the connection.
    task: AtomicWaker,
    /// [`MUTED`] and [`WOKEN`].
    state: AtomicU8,
}

/// Wakes are held back: the task is taking what the connection handed over.
const MUTED: u8 = 1;
/// The connection was woken since its last poll began.
const WOKEN: u8 = 2;

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked woken either way, atomically with the look at `MUTED`, so that a wake from
        // another thread as the task unmutes is either passed on here or seen there.
        if self.state.fetch_or(WOKEN, Ordering::AcqRel) & MUTED == 0 {
            self.task.wake();
        }
    }
}

impl DriverWaker {
    /// For a new connection, which is polled at the first look.
    pub(crate) fn new() -> DriverWaker {
        let shared = Arc::new(Shared {
            task: AtomicWaker::new(),
            state: AtomicU8::new(WOKEN),
        });
        let waker = Waker::from(shared.clone());
        DriverWaker { shared, waker }
    }

    /// Runs `poll` (a poll of the connection) for the task polling with `cx`, which the
    /// connection's wakes then wake; `None`, without running it, when nothing woke the
    /// connection since its last poll: every future it waits on holds its waker and wakes it
    /// when there is something to do.
    pub(crate) fn poll<R>(
        &self,
        cx: &Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> R,
    ) -> Option<R> {
        // The task first: a wake that comes after the look below then reaches it.
        self.shared.task.register(cx.waker());
        if self.shared.state.fetch_and(!WOKEN, Ordering::AcqRel) & WOKEN == 0 {
            return None;
        }
        Some(poll(&mut Context::from_waker(&self.waker)))
    }

    /// Has the connection polled at the next look, for what reaches it without a wake of
    /// this waker: a request handed to it after it was last polled with another waker (as
    /// the pool's look at an idle connection polls it with none).
    pub(crate) fn mark_woken(&self) {
        self.shared.state.fetch_or(WOKEN, Ordering::AcqRel);
    }

    /// Drops the waker of the task that polled last, for a connection going idle: it would
    /// keep that task's memory after the task has ended.
    pub(crate) fn forget(&self) {
        drop(self.shared.task.take());
    }

    /// Polls, with `take`, what only the connection fills (an answer's head, a body's
    /// channel), for the task polling with `cx`, right after polling the connection. It is
    /// polled with no waker, and the connection's wakes are held back meanwhile.
    ///
    /// When `take` finds nothing, the task is woken if a wake was held (it may have come
    /// from another thread, the socket's, and nothing else would poll the connection again)
    /// or if tokio's cooperative budget is spent (a tokio channel then answers `Pending`
    /// without looking and wakes the waker it was given, here none). Once something is
    /// taken, its taker polls again in any case, which polls the connection.
    pub(crate) fn take<T>(
        &self,
        cx: &Context<'_>,
        take: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let before = self.shared.state.fetch_or(MUTED, Ordering::AcqRel);
        let taken = take(&mut Context::from_waker(Waker::noop()));
        let after = self.shared.state.fetch_and(!MUTED, Ordering::AcqRel);
        // Only this task's poll of the connection clears `WOKEN`: set now and not before,
        // a wake came while muted and was not passed on.
        let held = after & !before & WOKEN != 0;
        if taken.is_pending() && (held || !tokio::task::coop::has_budget_remaining()) {
            cx.waker().wake_by_ref();
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wake_reaches_the_task_that_polled_last() {
        let driver = DriverWaker::new();
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let registered = driver
            .poll(&Context::from_waker(&first_waker), |cx| cx.waker().clone())
            .unwrap();
        registered.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        driver.poll(&Context::from_waker(&second_waker), |_| ());
        registered.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 1);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_while_taking_is_held_and_passed_on_only_when_nothing_was_taken() {
        let driver = DriverWaker::new();
        let (task, waker) = counting();
        let cx = Context::from_waker(&waker);
        let registered = driver.poll(&cx, |cx| cx.waker().clone()).unwrap();
        // Something taken: the wake it caused is not passed on, and the taker is not woken.
        let taken = driver.take(&cx, |_| {
            registered.wake_by_ref();
            Poll::Ready(())
        });
        assert!(taken.is_ready());
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        // Nothing taken, no wake: nothing to pass on.
        assert!(driver.take(&cx, |_| Poll::<()>::Pending).is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
        // Nothing taken while a wake came: the task is woken, once.
        driver.poll(&cx, |_| ());
        let taken = driver.take(&cx, |_| {
            registered.wake_by_ref();
            Poll::<()>::Pending
        });
        assert!(taken.is_pending());
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        // And after the take, wakes pass again.
        driver.poll(&cx, |_| ());
        registered.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_connection_is_polled_only_when_something_woke_it_since_its_last_poll() {
        let driver = DriverWaker::new();
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let polled =
            |waker: &Waker| driver.poll(&Context::from_waker(waker), |cx| cx.waker().clone());
        // New, it is polled at the first look, and not at the next.
        let registered = polled(&first_waker).unwrap();
        assert!(polled(&first_waker).is_none());
        // Not polled, it still wakes the task that looked last.
        assert!(polled(&second_waker).is_none());
        registered.wake_by_ref();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(polled(&second_waker).is_some());
        assert!(polled(&second_waker).is_none());
        // A wake held while something was taken is still a wake of the connection.
        let taken = driver.take(&Context::from_waker(&second_waker), |_| {
            registered.wake_by_ref();
            Poll::Ready(())
        });
        assert!(taken.is_ready());
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(polled(&second_waker).is_some());
        // A request handed over without a wake of this waker.
        assert!(polled(&second_waker).is_none());
        driver.mark_woken();
        assert!(polled(&second_waker).is_some());
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_wake_from_another_thread_as_the_connection_is_looked_at_is_never_lost() {
        let driver = DriverWaker::new();
        let (task, waker) = counting();
        let cx = Context::from_waker(&waker);
        let registered = driver.poll(&cx, |cx| cx.waker().clone()).unwrap();
        for _ in 0..2000 {
            // Registered, and nothing noted: a wake of the last round may have taken the task
            // and been seen by its look.
            let _ = driver.poll(&cx, |_| ());
            let before = task.0.load(Ordering::SeqCst);
            let waking = {
                let registered = registered.clone();
                std::thread::spawn(move || registered.wake())
            };
            let polled = driver.poll(&cx, |_| ()).is_some();
            waking.join().unwrap();
            // The task is woken either way; a wake the look missed is seen at the next one.
            assert_eq!(task.0.load(Ordering::SeqCst) - before, 1);
            assert!(
                polled || driver.poll(&cx, |_| ()).is_some(),
                "the wake was lost"
            );
        }
    }

    #[test]
    fn what_is_taken_is_polled_with_no_waker() {
        let driver = DriverWaker::new();
        let (task, waker) = counting();
        let cx = Context::from_waker(&waker);
        let _ = driver.take(&cx, |cx| {
            cx.waker().wake_by_ref();
            Poll::Ready(())
        });
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn forgotten_the_task_is_no_longer_held_or_woken() {
        let driver = DriverWaker::new();
        let (task, waker) = counting();
        let registered = driver
            .poll(&Context::from_waker(&waker), |cx| cx.waker().clone())
            .unwrap();
        drop(waker);
        assert_eq!(Arc::strong_count(&task), 2);
        driver.forget();
        assert_eq!(Arc::strong_count(&task), 1);
        registered.wake_by_ref();
        assert_eq!(task.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_wake_from_another_thread_is_never_lost() {
        let driver = DriverWaker::new();
        let (task, waker) = counting();
        let cx = Context::from_waker(&waker);
        for _ in 0..2000 {
            let registered = driver.poll(&cx, |cx| cx.waker().clone()).unwrap();
            let before = task.0.load(Ordering::SeqCst);
            let waking = std::thread::spawn(move || registered.wake());
            // Nothing taken: before, during or after, the wake reaches the task once.
            let _ = driver.take(&cx, |_| {
                std::thread::yield_now();
                Poll::<()>::Pending
            });
            waking.join().unwrap();
            assert_eq!(
                task.0.load(Ordering::SeqCst) - before,
                1,
                "the wake was lost"
            );
        }
    }
}
