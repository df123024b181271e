//! A request body that is not a valid protobuf message is the client's
//! error: tonic's codec answers it with INTERNAL (the status gRPC asks its
//! own implementations to use for a parse failure), which reads as a server
//! fault and tells the client nothing. `MalformedAsInvalid` wraps a service
//! and turns exactly that answer into INVALID_ARGUMENT `MALFORMED_REQUEST`,
//! with the usual `ErrorDetail` and metadata.

use tonic::body::Body;
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::server::NamedService;
use tonic::{Code, Status};

use crate::error::OmError;

/// How every message of a prost `DecodeError` begins; tonic's codec puts it
/// in an INTERNAL status when a request does not decode.
const DECODE_FAILURE: &str = "failed to decode Protobuf message";

/// Wraps a generated gRPC server (see the module docs).
#[derive(Debug, Clone)]
pub struct MalformedAsInvalid<S>(pub S);

impl<S: NamedService> NamedService for MalformedAsInvalid<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for MalformedAsInvalid<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let answer = self.0.call(req);
        Box::pin(async move { answer.await.map(rewrite) })
    }
}

/// Whether a status is tonic's answer to a request that did not decode.
fn is_decode_failure(s: &Status) -> bool {
    s.code() == Code::Internal && s.message().starts_with(DECODE_FAILURE)
}

/// The response unchanged, or for a decode failure (tonic keeps the status
/// in the response's extensions) om's INVALID_ARGUMENT in its place.
fn rewrite(resp: http::Response<Body>) -> http::Response<Body> {
    if !resp
        .extensions()
        .get::<Status>()
        .is_some_and(is_decode_failure)
    {
        return resp;
    }
    super::to_status(&OmError::invalid(
        "MALFORMED_REQUEST",
        "",
        "the request body is not a valid protobuf message for this method",
    ))
    .into_http()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn only_decode_failures_become_invalid_argument() {
        let err = om_proto::v1::CreateVolumeRequest::decode(&[0xff, 0xff, 0xff][..]).unwrap_err();
        let tonic_answer = Status::internal(err.to_string()).into_http::<Body>();
        let r = rewrite(tonic_answer);
        assert_eq!(r.headers()["grpc-status"], "3");
        assert_eq!(r.headers()["om-reason"], "MALFORMED_REQUEST");
        // Om's own internal errors stay what they are.
        let own =
            super::super::to_status(&OmError::Internal("storage: x".into())).into_http::<Body>();
        assert_eq!(rewrite(own).headers()["grpc-status"], "13");
    }
}
