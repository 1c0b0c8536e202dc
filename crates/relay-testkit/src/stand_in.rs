//! The server: accept loop, per-request exchange, and the handle tests hold.

#![expect(
    clippy::disallowed_methods,
    reason = "test support: a panic here fails the test that caused it, so a poisoned lock is read as is"
)]

use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::header::HeaderValue;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::behaviour::Behaviour;
use crate::body::{Framing, ScriptedBody};
use crate::error::Error;
use crate::record::{ExchangeGuard, Recorded, Recorder};
use crate::routes::{self, Answer, Prepared, Route};

/// Response header carrying the [`Recorded::id`] of the request it answers.
pub const REQUEST_ID_HEADER: &str = "x-stand-in-request-id";

/// How a [`StandIn`] starts.
#[derive(Debug, Clone)]
pub struct StandInConfig {
    /// Where to listen; `127.0.0.1:0` by default.
    pub listen: SocketAddr,
    /// The behaviour until `StandIn::set_behaviour` changes it.
    pub behaviour: Behaviour,
    /// Keep every request in memory (the default); benchmarks turn it off so memory stays flat.
    pub record_requests: bool,
}

impl Default for StandInConfig {
    fn default() -> StandInConfig {
        StandInConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            behaviour: Behaviour::default(),
            record_requests: true,
        }
    }
}

#[derive(Debug)]
struct Shared {
    recorder: Arc<Recorder>,
    prepared: Mutex<Arc<Prepared>>,
    /// The frames the live [`AnswerSteps`] lets through, if one lives.
    steps: Mutex<Option<Arc<Semaphore>>>,
}

impl Shared {
    fn prepared(&self) -> Arc<Prepared> {
        self.prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn steps(&self) -> Option<Arc<Semaphore>> {
        self.steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_prepared(&self, behaviour: Behaviour) {
        let prepared = Arc::new(Prepared::new(behaviour));
        *self.prepared.lock().unwrap_or_else(PoisonError::into_inner) = prepared;
    }
}

/// The running stand-in provider.
///
/// Dropping it stops the server and every task it spawned (they end at their next poll); `shutdown` also waits for them.
#[derive(Debug)]
pub struct StandIn {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// Yields `None` once every task has ended (each holds a sender it never uses).
    tasks_ended: mpsc::Receiver<()>,
}

impl StandIn {
    /// Listens on `127.0.0.1:0` with the default behaviour, recording every request.
    pub async fn start() -> Result<StandIn, Error> {
        StandIn::start_with(StandInConfig::default()).await
    }

    pub async fn start_with(config: StandInConfig) -> Result<StandIn, Error> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::LocalAddr { source })?;
        let shared = Arc::new(Shared {
            recorder: Arc::new(Recorder::new(config.record_requests)),
            prepared: Mutex::new(Arc::new(Prepared::new(config.behaviour))),
            steps: Mutex::new(None),
        });
        let (stop, stop_rx) = watch::channel(false);
        let (alive, tasks_ended) = mpsc::channel(1);
        let spawner = TaskSpawner {
            stop: stop_rx,
            alive,
        };
        spawner.spawn(accept_loop(listener, shared.clone(), spawner.clone()));
        Ok(StandIn {
            addr,
            shared,
            stop,
            tasks_ended,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Applies to the requests whose body ends after this call.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        self.shared.set_prepared(behaviour);
    }

    /// Holds every answer that starts while the returned guard lives after its first frame,
    /// until the guard is dropped: a test that must act while a stream is certainly still open
    /// (a stop signal, a drain) takes this instead of racing a pace against a clock. It is
    /// [`StandIn::step_answers`] with no step let through.
    pub fn hold_answers(&self) -> AnswerSteps {
        self.step_answers()
    }

    /// Sends the answers that start while the returned guard lives one frame at a time: the
    /// first frame goes at once, and each one after it waits for [`AnswerSteps::release`]. A
    /// test that must see each frame arrive before the next is sent takes this instead of
    /// pacing the answer and timing the arrivals. Dropping the guard lets the rest go on.
    ///
    /// The steps are shared: while several stepped answers run, a step goes to whichever
    /// sends next. An answer sent whole (a JSON one) has no frame after its first, and the
    /// end of a body takes no step, but a failure injected with `fail_after_bytes` does.
    pub fn step_answers(&self) -> AnswerSteps {
        let frames = Arc::new(Semaphore::new(0));
        *self
            .shared
            .steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(frames.clone());
        AnswerSteps {
            shared: self.shared.clone(),
            frames,
        }
    }

    pub fn behaviour(&self) -> Behaviour {
        self.shared.prepared().behaviour.clone()
    }

    /// Turns tool round trip mode on or off, keeping the other knobs.
    pub fn set_tool_round_trip(&self, enabled: bool) {
        let mut behaviour = self.behaviour();
        behaviour.tool_round_trip = enabled;
        self.set_behaviour(behaviour);
    }

    /// Every recorded request, in the order their bodies ended.
    ///
    /// A request is recorded once its body has ended, cleanly or not, so one still being uploaded is not listed yet.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.recorder.with_records(<[Recorded]>::to_vec)
    }

    pub fn request(&self, id: u64) -> Option<Recorded> {
        self.shared
            .recorder
            .with_records(|records| records.iter().find(|r| r.id == id).cloned())
    }

    pub fn request_count(&self) -> usize {
        self.shared.recorder.with_records(<[Recorded]>::len)
    }

    /// Forgets what was recorded (ids keep counting).
    pub fn clear_requests(&self) {
        self.shared.recorder.clear();
    }

    /// Waits until at least `n` requests are recorded and returns them all.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Recorded>, Error> {
        let found = self
            .shared
            .recorder
            .wait_until(deadline(timeout), |records| {
                (records.len() >= n).then(|| records.to_vec())
            })
            .await;
        found.ok_or_else(|| Error::RequestsTimedOut {
            wanted: n,
            got: self.request_count(),
            timeout,
        })
    }

    /// Waits until the client of request `id` is recorded as gone and returns that request.
    pub async fn wait_for_client_gone(
        &self,
        id: u64,
        timeout: Duration,
    ) -> Result<Recorded, Error> {
        let found = self
            .shared
            .recorder
            .wait_until(deadline(timeout), |records| {
                records
                    .iter()
                    .find(|r| r.id == id && r.client_went_away)
                    .cloned()
            })
            .await;
        found.ok_or_else(|| match self.request(id) {
            Some(_) => Error::ClientStillConnected { id, timeout },
            None => Error::RequestNotRecorded { id, timeout },
        })
    }

    /// Waits until `check` finds what it looks for in the recorded requests.
    pub async fn wait_until<T>(
        &self,
        timeout: Duration,
        check: impl FnMut(&[Recorded]) -> Option<T>,
    ) -> Result<T, Error> {
        self.shared
            .recorder
            .wait_until(deadline(timeout), check)
            .await
            .ok_or(Error::ConditionTimedOut { timeout })
    }

    /// Stops accepting, aborts every connection and waits until all of the stand-in's tasks have ended.
    pub async fn shutdown(mut self) {
        self.shared.recorder.begin_shutdown();
        self.stop.send_replace(true);
        while self.tasks_ended.recv().await.is_some() {}
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.shared.recorder.begin_shutdown();
        self.stop.send_replace(true);
    }
}

/// Answers that started while this lives send a frame after their first only when
/// [`AnswerSteps::release`] lets one through; dropping it lets the rest go on.
#[derive(Debug)]
#[must_use = "the answers go on as soon as this is dropped"]
pub struct AnswerSteps {
    shared: Arc<Shared>,
    frames: Arc<Semaphore>,
}

impl AnswerSteps {
    /// Lets `frames` more frames through, taken by whichever stepped answer sends next.
    pub fn release(&self, frames: usize) {
        self.frames.add_permits(frames);
    }
}

impl Drop for AnswerSteps {
    fn drop(&mut self) {
        let mut steps = self
            .shared
            .steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if steps
            .as_ref()
            .is_some_and(|live| Arc::ptr_eq(live, &self.frames))
        {
            *steps = None;
        }
        // Answers waiting for a step go on, and no longer wait.
        self.frames.close();
    }
}

fn deadline(timeout: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + timeout
}

/// Spawns the stand-in's tasks (its own and hyper's HTTP/2 stream tasks) so that each ends when the stand-in stops.
#[derive(Debug, Clone)]
struct TaskSpawner {
    stop: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
}

impl TaskSpawner {
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut stop = self.stop.clone();
        let alive = self.alive.clone();
        // Owned through `stop` (cancels it) and `alive` (tells `StandIn::shutdown` it ended), so the handle is not kept.
        drop(tokio::spawn(async move {
            let _alive = alive;
            tokio::select! {
                () = task => {}
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
        }));
    }
}

impl<F> hyper::rt::Executor<F> for TaskSpawner
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        self.spawn(async move {
            fut.await;
        });
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, spawner: TaskSpawner) {
    // HTTP/1.1, or HTTP/2 with prior knowledge (h2c), told apart by the connection preface.
    let builder = auto::Builder::new(spawner.clone());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(%error, "stand-in accept failed");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "stand-in could not set tcp_nodelay");
        }
        let shared = shared.clone();
        let builder = builder.clone();
        spawner.spawn(async move {
            let service = service_fn(move |req| exchange(shared.clone(), peer, req));
            if let Err(error) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "stand-in connection ended with an error");
            }
        });
    }
}

/// One request: read and record its body, then answer as the current behaviour says.
async fn exchange(
    shared: Arc<Shared>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ScriptedBody>, Infallible> {
    let received_at = Instant::now();
    let recorder = &shared.recorder;
    let id = recorder.next_id();
    let (parts, mut incoming) = req.into_parts();
    let pending = recorder.is_enabled().then(|| Recorded {
        id,
        method: parts.method.clone(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        version: parts.version,
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        body: bytes::Bytes::new(),
        body_complete: false,
        peer,
        client_went_away: false,
        went_away_at: None,
        received_at,
    });
    let mut guard = ExchangeGuard::receiving(recorder.clone(), id, pending);
    let complete = loop {
        match incoming.frame().await {
            None => break true,
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    guard.push_body(data);
                }
            }
            Some(Err(_)) => break false,
        }
    };
    let body = guard.commit(complete);
    if !complete {
        // The request broke off; hyper has nobody to write an answer to.
        let answer =
            ScriptedBody::new(bytes::Bytes::new(), Framing::Whole, None, None, true, guard);
        let mut res = Response::new(answer);
        *res.status_mut() = http::StatusCode::BAD_REQUEST;
        return Ok(res);
    }

    let route = routes::route(&parts.method, parts.uri.path());
    let prepared = shared.prepared();
    let behaviour = &prepared.behaviour;
    // `HEAD /` ignores the knobs so a harness's probe never trips over a test's fault injection.
    let faults = route != Route::Probe;
    if faults && behaviour.hang_before_headers {
        // Until the client goes away: hyper then drops this future and the guard records it.
        std::future::pending::<()>().await;
    }
    if faults && let Some(delay) = behaviour.delay_before_headers {
        tokio::time::sleep(delay).await;
    }
    let answer = match &behaviour.status {
        Some(canned) if faults => Answer::canned(canned),
        _ => routes::answer(
            route,
            parts.uri.path(),
            &parts.headers,
            &body,
            &prepared,
            id,
        ),
    };
    let framing = match behaviour.chunk_size {
        Some(size) if faults => Framing::Chunks(size),
        _ if answer.sse => Framing::Events,
        _ => Framing::Whole,
    };
    let pace = behaviour.pace.filter(|_| faults);
    let fail_after = behaviour.fail_after_bytes.filter(|_| faults);
    let scripted = ScriptedBody::new(answer.body, framing, pace, fail_after, !answer.sse, guard)
        .stepped_by(shared.steps());
    let mut res = Response::new(scripted);
    *res.status_mut() = answer.status;
    *res.headers_mut() = answer.headers;
    res.headers_mut()
        .insert(REQUEST_ID_HEADER, HeaderValue::from(id));
    Ok(res)
}

#[cfg(test)]
mod tests;
