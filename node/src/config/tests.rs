use super::*;

#[test]
fn layers_apply_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ebb.toml");
    std::fs::write(
        &file,
        "data_dir = \"/from/file\"\nhttp_addr = \"127.0.0.1:1\"\npg_addr = \"127.0.0.1:2\"\n",
    )
    .expect("write");
    let env =
        Overrides::from_env(|k| (k == "EBB_HTTP_ADDR").then(|| "127.0.0.1:3".into())).expect("env");
    let flags = Overrides { data_dir: Some("/from/flag".into()), ..Default::default() };
    let c = resolve(Some(&file), &env, &flags).expect("resolve");
    assert_eq!(c.data_dir, PathBuf::from("/from/flag"));
    assert_eq!(c.http_addr.port(), 3);
    assert_eq!(c.pg_addr.port(), 2);
    assert_eq!(c.grpc_addr.port(), 7090);
    // A key this build does not know is ignored and reported (a newer build's setting must not
    // stop a rolled-back binary from starting); one of a known key's wrong type is refused.
    std::fs::write(&file, "nonsense = 1\npg_addr = \"127.0.0.1:2\"\n[later]\nx = 2\n")
        .expect("write");
    let c = resolve(Some(&file), &Overrides::default(), &Overrides::default()).expect("resolve");
    assert_eq!(c.ignored_keys, ["later", "nonsense"]);
    assert_eq!(c.pg_addr.port(), 2);
    std::fs::write(&file, "pg_addr = 5\n").expect("write");
    assert!(resolve(Some(&file), &Overrides::default(), &Overrides::default()).is_err());
    let bad = Overrides { http_addr: Some("localhost".into()), ..Default::default() };
    assert!(resolve(None, &bad, &Overrides::default())
        .unwrap_err()
        .to_string()
        .contains("http_addr"));
    std::fs::write(dir.path().join("pw"), "s3cret\n").expect("write");
    let pw = Overrides { admin_password_file: Some(dir.path().join("pw")), ..Default::default() };
    let c = resolve(None, &pw, &Overrides::default()).expect("password file");
    assert_eq!(c.admin_password, Some(Secret("s3cret".into())));
    assert!(!format!("{c:?}").contains("s3cret"));
    let env =
        Overrides::from_env(|k| (k == "EBB_ADMIN_PASSWORD").then(|| "x".into())).expect("env");
    assert_eq!(
        resolve(None, &env, &Overrides::default()).expect("env").admin_password,
        Some(Secret("x".into()))
    );
    let missing =
        Overrides { admin_password_file: Some(dir.path().join("nope")), ..Default::default() };
    assert!(resolve(None, &missing, &Overrides::default()).is_err());
    let limits = Overrides {
        query_memory: Some("64MiB".into()),
        statement_timeout: Some("none".into()),
        ..Default::default()
    };
    let c = resolve(None, &limits, &Overrides::default()).expect("limits");
    assert_eq!(c.limits.query_memory_bytes, 64 << 20);
    assert_eq!(c.limits.statement_timeout, None);
    for bad in ["64XB", "", "0", "99999999999GiB"] {
        let o = Overrides { query_memory: Some(bad.into()), ..Default::default() };
        assert!(resolve(None, &o, &Overrides::default()).is_err(), "{bad}");
    }
    let none = Overrides { delete_deadline: Some("none".into()), ..Default::default() };
    assert_eq!(resolve(None, &none, &Overrides::default()).expect("none").delete_deadline, None);
    let half = Overrides { tls_cert: Some("/c.pem".into()), ..Default::default() };
    assert!(resolve(None, &half, &Overrides::default())
        .unwrap_err()
        .to_string()
        .contains("tls_key"));
    let key = Overrides { tls_key: Some("/k.pem".into()), ..Default::default() };
    let c = resolve(None, &half, &key).expect("cert from the environment, key from a flag");
    assert_eq!(c.tls, Some(CertFiles { cert: "/c.pem".into(), key: "/k.pem".into() }));
    let cluster = Overrides { cluster_ca: Some("/ca.pem".into()), ..Default::default() };
    assert!(resolve(None, &cluster, &Overrides::default()).is_err());
}

#[test]
fn raft_heartbeat_is_a_bounded_duration() {
    let resolved = |v: &str| {
        let env = Overrides::from_env(|k| (k == "EBB_RAFT_HEARTBEAT").then(|| v.to_string()));
        resolve(None, &env.expect("env"), &Overrides::default()).map(|c| c.raft_heartbeat)
    };
    assert_eq!(Config::default().raft_heartbeat, DEFAULT_RAFT_HEARTBEAT);
    assert_eq!(resolved("250ms").expect("250ms"), Duration::from_millis(250));
    assert_eq!(resolved("2s").expect("2s"), Duration::from_secs(2));
    assert_eq!(resolved("400").expect("plain ms"), Duration::from_millis(400));
    for bad in ["5ms", "11s", "fast", "1h", ""] {
        let err = resolved(bad).expect_err(bad).to_string();
        assert!(err.contains("raft_heartbeat"), "{bad}: {err}");
    }
}
