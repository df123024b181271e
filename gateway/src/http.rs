//! The optional HTTP side (`--http`): `/healthz` (the process answers) and
//! `/metrics` (Prometheus text: requests by operation and outcome, their
//! latency, blocks reclaimed). Kept off the S3 port, whose every path is a
//! bucket.

use std::convert::Infallible;
use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

/// Installs the process-wide recorder once and returns its handle.
pub fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding
            // program's); this handle then renders only what it sees.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

fn answer(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

fn route(prom: &PrometheusHandle, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" => answer(StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/metrics" => answer(StatusCode::OK, "text/plain; version=0.0.4", prom.render()),
        _ => answer(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    }
}

/// Most connections the HTTP port holds (probes and a scraper need few).
pub const MAX_CONNECTIONS: usize = 64;

/// Serves `/healthz` and `/metrics` until `stop` turns true, on a port with
/// the S3 port's limits (`om_tls::net`).
pub async fn serve(
    mut listener: om_tls::net::LimitedListener,
    prom: PrometheusHandle,
    mut stop: watch::Receiver<bool>,
) {
    let closer = listener.closer();
    loop {
        let stream = tokio::select! {
            (s, _) = listener.accept_limited() => s,
            _ = stop.changed() => break,
        };
        let prom = prom.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let r = route(&prom, &req);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(crate::HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
    closer.close();
}
