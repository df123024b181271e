//! The public port's side of `incarnation`: a fenced member refuses every
//! request (and replaces an answer computed before it was fenced), and every
//! answer names the cluster and incarnation it comes from (`om-cluster:
//! ID/INCARNATION`) and the incarnations that one replaced
//! (`om-superseded`), so a client can refuse answers from another cluster or
//! a replaced incarnation, and follow a newer one.

use std::sync::Arc;

use tonic::codegen::http;

use super::guard::{Answer, Guard, Refusal};
use crate::incarnation::Incarnation;

/// The response header naming the answering member's cluster and
/// incarnation.
pub const HEADER: &str = "om-cluster";
/// The response header listing the incarnations the answering member's
/// replaced (comma-separated; absent when none).
pub const SUPERSEDED_HEADER: &str = "om-superseded";

#[derive(Clone)]
pub struct Incarnated(pub Arc<Incarnation>);

fn superseded(why: &str) -> Refusal {
    Box::new(
        super::refusal(
            tonic::Code::Unavailable,
            "SUPERSEDED",
            "",
            &format!(
                "this member serves nothing: {why}; {}",
                crate::incarnation::fence_advice()
            ),
        )
        .into_http(),
    )
}

impl Guard for Incarnated {
    type Admitted = ();

    fn admit<B>(&self, _req: &mut http::Request<B>) -> Result<(), Refusal> {
        match self.0.fenced() {
            Some(why) => Err(superseded(&why)),
            None => Ok(()),
        }
    }

    fn run(&self, _: (), call: Answer) -> Answer {
        let incarnation = self.0.clone();
        Box::pin(async move {
            let mut resp = call.await?;
            if let Some(why) = incarnation.fenced() {
                return Ok(*superseded(&why));
            }
            if let Some(label) = incarnation.label()
                && let Ok(v) = http::HeaderValue::from_str(&label)
            {
                resp.headers_mut().insert(HEADER, v);
                let superseded = incarnation.superseded();
                if !superseded.is_empty() {
                    let list = superseded
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(",");
                    if let Ok(v) = http::HeaderValue::from_str(&list) {
                        resp.headers_mut().insert(SUPERSEDED_HEADER, v);
                    }
                }
            }
            Ok(resp)
        })
    }
}
