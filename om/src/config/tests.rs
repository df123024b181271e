//! Tests of configuration loading.
use super::*;

#[test]
fn statefulset_pod_names_give_node_ids() {
    assert_eq!(node_id_of_host("om-0").unwrap(), 1);
    assert_eq!(node_id_of_host("om-2").unwrap(), 3);
    assert_eq!(node_id_of_host("my-om-12.om-peers.ns.svc").unwrap(), 13);
    for bad in ["om", "om-", "om-x", "", "om-99999999999999999999"] {
        assert!(node_id_of_host(bad).is_err(), "{bad}");
    }
}

#[test]
fn flags_override_file_and_defaults_fill_in() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("om.toml");
    std::fs::write(&f, "grpc_addr = \"127.0.0.1:7000\"\nmax_page = 5\n").unwrap();
    let cfg = Config::load(Args {
        config: Some(f),
        max_page: Some(7),
        ..Args::default()
    })
    .unwrap();
    assert_eq!(cfg.grpc_addr.port(), 7000);
    assert_eq!(cfg.max_page, 7);
    assert_eq!(cfg.http_addr.port(), 9874);
    assert_eq!(cfg.node_id, 1);
}

#[test]
fn response_budget_has_a_floor_and_a_default_under_4_mib() {
    let cfg = Config::load(Args::default()).unwrap();
    assert!(cfg.max_response_bytes < 4 * 1024 * 1024);
    assert!(cfg.max_response_bytes >= MIN_RESPONSE_BYTES);
    let small = Config::load(Args {
        max_response_bytes: Some(MIN_RESPONSE_BYTES - 1),
        ..Args::default()
    });
    assert!(small.is_err());
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("om.toml");
    std::fs::write(&f, "max_response_bytes = 100000\n").unwrap();
    let cfg = Config::load(Args {
        config: Some(f),
        ..Args::default()
    })
    .unwrap();
    assert_eq!(cfg.max_response_bytes, 100_000);
}

#[test]
fn joiners_and_tokens_need_what_secures_them() {
    let tls = || Args {
        tls_cert: Some("c.pem".into()),
        tls_key: Some("k.pem".into()),
        tls_ca: Some("ca.pem".into()),
        ..Args::default()
    };
    let e = Config::load(Args {
        join: true,
        ..tls()
    })
    .unwrap_err();
    assert!(e.contains("--initial-cluster"), "{e}");
    assert!(
        Config::load(Args {
            join: true,
            initial_cluster: Some("1=127.0.0.1:9872".into()),
            node_id: Some(4),
            ..tls()
        })
        .is_ok()
    );
    let tokens = || Args {
        token_file: Some("tokens".into()),
        ..Args::default()
    };
    let e = Config::load(tokens()).unwrap_err();
    assert!(
        e.contains("--token-file") && e.contains("--insecure"),
        "{e}"
    );
    assert!(
        Config::load(Args {
            insecure: true,
            ..tokens()
        })
        .is_ok()
    );
    assert!(
        Config::load(Args {
            token_file: Some("tokens".into()),
            ..tls()
        })
        .is_ok()
    );
}

#[test]
fn plaintext_is_for_loopback_unless_insecure() {
    let open = |a: &str| Args {
        grpc_addr: Some(a.parse().unwrap()),
        ..Args::default()
    };
    let e = Config::load(open("0.0.0.0:9862")).unwrap_err();
    assert!(e.contains("--grpc-addr") && e.contains("--insecure"), "{e}");
    let e = Config::load(Args {
        raft_addr: Some("10.1.2.3:9872".parse().unwrap()),
        ..Args::default()
    })
    .unwrap_err();
    assert!(e.contains("--raft-addr"), "{e}");
    assert!(
        Config::load(Args {
            insecure: true,
            ..open("0.0.0.0:9862")
        })
        .is_ok()
    );
    assert!(Config::load(open("[::1]:9862")).is_ok());
    let with_tls = Config::load(Args {
        tls_cert: Some("c.pem".into()),
        tls_key: Some("k.pem".into()),
        tls_ca: Some("ca.pem".into()),
        ..open("0.0.0.0:9862")
    })
    .unwrap();
    assert_eq!(
        with_tls.tls.cert.as_deref(),
        Some(std::path::Path::new("c.pem"))
    );
    for partial in [
        Args {
            tls_cert: Some("c.pem".into()),
            ..Args::default()
        },
        Args {
            tls_cert: Some("c.pem".into()),
            tls_key: Some("k.pem".into()),
            ..Args::default()
        },
        Args {
            tls_ca: Some("ca.pem".into()),
            ..Args::default()
        },
    ] {
        assert!(Config::load(partial).is_err());
    }
}

#[test]
fn connection_settings_come_from_every_source() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("om.toml");
    std::fs::write(
        &f,
        "max_grpc_connections = 500\nmax_http_connections = 3\nidle_timeout_s = 9\ndb_max_open_files = 77\n",
    )
    .unwrap();
    let cfg = Config::load(Args {
        config: Some(f),
        max_grpc_connections: Some(600),
        max_raft_connections: Some(20),
        ..Args::default()
    })
    .unwrap();
    assert_eq!(cfg.fd_overrides.grpc_connections, Some(600));
    assert_eq!(cfg.fd_overrides.raft_connections, Some(20));
    assert_eq!(cfg.fd_overrides.http_connections, Some(3));
    assert_eq!(cfg.fd_overrides.db_max_open_files, Some(77));
    assert_eq!(cfg.idle_timeout, Duration::from_secs(9));
    let d = Config::load(Args::default()).unwrap();
    assert_eq!(d.fd_overrides, crate::descriptors::Overrides::default());
    assert_eq!(d.idle_timeout, Duration::from_secs(DEFAULT_IDLE_TIMEOUT_S));
}

#[test]
fn unknown_file_keys_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("om.toml");
    std::fs::write(&f, "grpc_adr = \"x\"\n").unwrap();
    assert!(
        Config::load(Args {
            config: Some(f),
            ..Args::default()
        })
        .is_err()
    );
}

#[test]
fn initial_cluster_parses() {
    let m = parse_initial_cluster("2=h:2/h:3, 1=h:1").unwrap();
    assert_eq!(m[0].id, 1);
    assert_eq!(m[1].grpc_addr, "h:3");
    assert!(parse_initial_cluster("1=a,1=b").is_err());
    assert!(parse_initial_cluster("x=a").is_err());
}
