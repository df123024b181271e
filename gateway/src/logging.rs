//! The gateway's log filter. Whatever level an operator asks for, s3s's
//! modules that log a request's signature (the expected one of a failed
//! check, which would let a reader of the log forge that request) or its
//! whole head (the Authorization header) log at most at INFO.

use tracing_subscriber::EnvFilter;

/// Targets capped at INFO, each more specific than any `s3s` directive an
/// operator writes, and added last so they replace one naming the same
/// target.
const CAPPED: &[&str] = &["s3s::ops::signature=info", "s3s::service=info"];

/// The filter for `asked` (`OM_LOG` or `RUST_LOG` syntax; `None` or
/// unparsable: INFO) with the caps applied.
pub fn filter(asked: Option<&str>) -> EnvFilter {
    let mut f = asked
        .and_then(|a| EnvFilter::try_new(a).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    for cap in CAPPED {
        if let Ok(d) = cap.parse() {
            f = f.add_directive(d);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// At every level asked, s3s's signature and request logs stay at
    /// INFO, while other debug logs, s3s's included, still come through.
    #[test]
    fn signatures_and_authorization_headers_are_never_logged() {
        for asked in [
            "debug",
            "trace",
            "s3s=trace",
            "s3s=debug,s3s::ops::signature=trace,s3s::service=debug",
        ] {
            let out = Buffer::default();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(filter(Some(asked)))
                .with_writer(out.clone())
                .finish();
            tracing::subscriber::with_default(subscriber, || {
                tracing::debug!(target: "s3s::ops::signature", expected = "f00dsig", "signature mismatch");
                tracing::debug!(target: "s3s::service", authorization = "AWS4-HMAC-SHA256 Credential=k", "req");
                tracing::debug!(target: "s3s::ops", "other s3s debug");
            });
            let logged = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            assert!(!logged.contains("f00dsig"), "{asked}: {logged}");
            assert!(!logged.contains("AWS4-HMAC"), "{asked}: {logged}");
            assert!(logged.contains("other s3s debug"), "{asked}: {logged}");
        }
    }
}
