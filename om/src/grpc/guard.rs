//! One layer for every check that answers a gRPC request before its
//! message is decoded: a `Guard` admits or refuses the request from its
//! head (path, headers, the connection's `ConnInfo`), and may wrap the call
//! it admits. `Guarded` is the tower service around any guard; the public
//! port's `Authenticate`, the Raft port's `MembersOnly` and `RaftGate` are
//! guards.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The response to a request.
pub type Answer = BoxFuture<Result<http::Response<Body>, Infallible>>;

/// The answer to a refused request (boxed: a response is large).
pub type Refusal = Box<http::Response<Body>>;

/// A check in front of a gRPC service.
pub trait Guard {
    /// What an admitted request carries on to `run`.
    type Admitted: Send + 'static;

    /// Admits the request (it may add extensions to it) or answers it
    /// without calling the service.
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<Self::Admitted, Refusal>;

    /// Runs the service's answer to an admitted request; by default as is.
    fn run(&self, admitted: Self::Admitted, call: Answer) -> Answer {
        let _ = admitted;
        call
    }
}

/// A service behind a guard.
#[derive(Clone)]
pub struct Guarded<S, G> {
    inner: S,
    guard: G,
}

impl<S, G> Guarded<S, G> {
    pub fn new(inner: S, guard: G) -> Self {
        Guarded { inner, guard }
    }
}

impl<S: NamedService, G> NamedService for Guarded<S, G> {
    const NAME: &'static str = S::NAME;
}

impl<S, G, B> Service<http::Request<B>> for Guarded<S, G>
where
    S: Service<http::Request<B>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
    G: Guard,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Answer {
        match self.guard.admit(&mut req) {
            Ok(admitted) => self.guard.run(admitted, Box::pin(self.inner.call(req))),
            Err(refusal) => Box::pin(async move { Ok(*refusal) }),
        }
    }
}

/// The RPC a request calls: the last segment of its path.
pub fn method<B>(req: &http::Request<B>) -> &str {
    req.uri().path().rsplit('/').next().unwrap_or_default()
}
