//! The pooled client toward model providers (SPEC §3.2, §3.3, §3.7): rustls with the
//! platform roots, HTTP/1.1 and HTTP/2 by ALPN, `TCP_NODELAY`, a connect timeout, an
//! optional response-head timeout, and an optional egress proxy with `NO_PROXY`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::body::{BodyError, RequestBody};
use crate::tls;

type Stream = MaybeHttpsStream<TokioIo<TcpStream>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the upstream client behaves.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    pub connect_timeout: Duration,
    /// `None`: no response-head deadline (the default: long thinking calls take minutes).
    pub response_timeout: Option<Duration>,
    /// Egress proxy URL, if any.
    pub proxy_url: Option<String>,
    /// The `NO_PROXY` list, read by the caller from the environment.
    pub no_proxy: Option<String>,
}

impl UpstreamOptions {
    /// The options of `[upstream]`, with `NO_PROXY` (or `no_proxy`) from `env`.
    pub fn from_config(
        config: &crate::config::UpstreamConfig,
        env: &impl relay_identity::Env,
    ) -> UpstreamOptions {
        let response = config.response_timeout_secs;
        UpstreamOptions {
            connect_timeout: config.connect_timeout_secs.get(),
            response_timeout: (!response.is_zero()).then(|| response.get()),
            proxy_url: (!config.proxy_url.is_empty()).then(|| config.proxy_url.clone()),
            no_proxy: env
                .var_os("NO_PROXY")
                .or_else(|| env.var_os("no_proxy"))
                .map(|v| v.to_string_lossy().into_owned()),
        }
    }
}

/// Why an upstream request produced no response head.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the request body exceeds the limit of {limit} bytes")]
    BodyTooLarge { limit: u64 },
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    #[error("the upstream could not be reached")]
    Unreachable(#[source] BoxError),
    #[error("the upstream sent no response head in time")]
    ResponseHeadTimeout,
    #[error("the upstream failed before its response head")]
    Failed(#[source] BoxError),
}

impl UpstreamError {
    /// The `reason` field of request-failure log events.
    pub fn reason(&self) -> &'static str {
        match self {
            UpstreamError::BodyTooLarge { .. } => "body_too_large",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::Unreachable(_) => "connect_failed",
            UpstreamError::ResponseHeadTimeout => "response_head_timeout",
            UpstreamError::Failed(_) => "upstream_failed",
        }
    }
}

/// A pooled provider client. Cheap to clone.
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    client: Client<HttpsConnector<EgressConnector>, RequestBody>,
    response_timeout: Option<Duration>,
}

impl UpstreamClient {
    pub fn new(options: &UpstreamOptions) -> Result<UpstreamClient, tls::TlsError> {
        let tls = tls::provider_client_config()?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(options.connect_timeout));
        let http = Dialer(http);
        let egress = match options.proxy_url.as_deref().filter(|p| !p.is_empty()) {
            None => EgressConnector::direct(http),
            Some(proxy) => {
                let matcher = Matcher::builder()
                    .all(proxy.to_owned())
                    .no(options.no_proxy.clone().unwrap_or_default())
                    .build();
                let to_proxy = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls.clone())
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(http.clone());
                EgressConnector::proxied(http, to_proxy, matcher)
            }
        };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(egress);
        let client = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .http1_max_buf_size(64 * 1024)
            .http2_initial_stream_window_size(64 * 1024)
            .http2_adaptive_window(false)
            .build(https);
        Ok(UpstreamClient {
            client,
            response_timeout: options.response_timeout,
        })
    }

    /// Sends one request and waits for its response head. Never retried here: once bytes
    /// may have reached the provider, sending again could bill twice.
    pub async fn send(
        &self,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let sending = self.client.request(req);
        let result = match self.response_timeout {
            Some(limit) => match tokio::time::timeout(limit, sending).await {
                Ok(result) => result,
                Err(_) => return Err(UpstreamError::ResponseHeadTimeout),
            },
            None => sending.await,
        };
        result.map_err(classify)
    }
}

fn classify(error: hyper_util::client::legacy::Error) -> UpstreamError {
    if let Some(BodyError::TooLarge { limit }) = BodyError::find(&error) {
        return UpstreamError::BodyTooLarge { limit: *limit };
    }
    if error.is_connect() {
        if is_timeout(&error) {
            return UpstreamError::ConnectTimeout;
        }
        return UpstreamError::Unreachable(Box::new(error));
    }
    UpstreamError::Failed(Box::new(error))
}

fn is_timeout(mut error: &(dyn std::error::Error + 'static)) -> bool {
    loop {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::TimedOut
        {
            return true;
        }
        match error.source() {
            Some(next) => error = next,
            None => return false,
        }
    }
}

/// Opens every TCP connection of the provider client, to the provider or to the egress
/// proxy, and gives it Relay's socket options ([`crate::sockets::prepare`]).
#[derive(Clone)]
struct Dialer(HttpConnector);

impl tower_service::Service<Uri> for Dialer {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.0.call(dst);
        Box::pin(async move {
            let tcp = connecting.await?;
            crate::sockets::prepare(tcp.inner());
            Ok(tcp)
        })
    }
}

/// Connects directly, or through a CONNECT proxy unless `NO_PROXY` exempts the host.
#[derive(Clone)]
pub struct EgressConnector {
    direct: Dialer,
    proxy: Option<Arc<ProxyRoute>>,
}

struct ProxyRoute {
    matcher: Matcher,
    to_proxy: HttpsConnector<Dialer>,
}

impl std::fmt::Debug for EgressConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressConnector")
            .field("proxied", &self.proxy.is_some())
            .finish()
    }
}

impl EgressConnector {
    fn direct(direct: Dialer) -> EgressConnector {
        EgressConnector {
            direct,
            proxy: None,
        }
    }

    fn proxied(
        direct: Dialer,
        to_proxy: HttpsConnector<Dialer>,
        matcher: Matcher,
    ) -> EgressConnector {
        EgressConnector {
            direct,
            proxy: Some(Arc::new(ProxyRoute { matcher, to_proxy })),
        }
    }
}

impl tower_service::Service<Uri> for EgressConnector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let intercept = self.proxy.as_ref().and_then(|p| p.matcher.intercept(&dst));
        match (intercept, &self.proxy) {
            (Some(intercept), Some(route)) => {
                let mut tunnel = Tunnel::new(intercept.uri().clone(), route.to_proxy.clone());
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Box::pin(async move {
                    let mut tunnel = tunnel;
                    tower_service::Service::call(&mut tunnel, dst)
                        .await
                        .map_err(|e| Box::new(e) as BoxError)
                })
            }
            _ => {
                let mut direct = self.direct.clone();
                Box::pin(async move {
                    let tcp = tower_service::Service::call(&mut direct, dst).await?;
                    Ok(MaybeHttpsStream::Http(tcp))
                })
            }
        }
    }
}
