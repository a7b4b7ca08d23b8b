//! The backup store against an S3-compatible server process: moto's server mode, installed
//! from PyPI into the test venv (`.ci/run` installs it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ebb_backup::transfer::download_part;
use object_store::ObjectStoreExt;

use ebb_backup::{BackupError, BackupStore, Destination, LockKind, Progress, Throttle};

use super::{backup, body, write_files};

/// A running `moto_server`, killed when dropped.
struct Moto {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn moto_server() -> PathBuf {
    let venv = std::env::var_os("EBB_CI_VENV").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/ebb-ci-venv")
    });
    let bin = venv.join("bin/moto_server");
    assert!(
        bin.exists(),
        "{} is missing: run .ci/run once, or pip install 'moto[server]' into that venv",
        bin.display()
    );
    bin
}

/// Sends one unsigned HTTP request (moto accepts them) and returns the status code.
fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let code: Option<u16> = out.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    code.ok_or_else(|| std::io::Error::other(format!("no status in {out:?}")))
}

fn start_moto() -> Moto {
    let port = TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let child = Command::new(moto_server())
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting moto_server");
    let moto = Moto { child, addr };
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(addr, "GET", "/", b"").is_err() {
        assert!(Instant::now() < deadline, "moto_server did not answer on {addr} in 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    moto
}

#[tokio::test]
async fn backups_to_an_s3_compatible_server() {
    let moto = start_moto();
    assert_eq!(http(moto.addr, "PUT", "/ebb", b"").unwrap(), 200, "creating the bucket");
    let tmp = tempfile::tempdir().unwrap();
    let creds = tmp.path().join("credentials");
    std::fs::write(&creds, "[default]\naws_access_key_id = test\naws_secret_access_key = test\n")
        .unwrap();
    let uri = format!(
        "s3://ebb/backups?endpoint=http://{}&region=us-east-1&allow_http=true&credentials={}",
        moto.addr,
        creds.display()
    );
    let dest = Destination::parse(&uri).unwrap();
    assert!(!dest.to_string().contains("test\n"), "{dest}");
    let store = BackupStore::create(&dest, Throttle::none()).await.unwrap();

    // A large file goes up in parts; a second backup copies only what is new.
    let src = tmp.path().join("src");
    write_files(&src, &[("a.sst", body(1, 20 << 20)), ("MANIFEST", body(2, 10))]);
    let (first, p1) = backup(&store, &src, "20231114T221320.000Z").await;
    assert_eq!((p1.objects_copied, p1.bytes_copied), (2, (20 << 20) + 10));
    write_files(&src, &[("b.sst", body(3, 3000)), ("MANIFEST", body(4, 12))]);
    let (second, p2) = backup(&store, &src, "20231114T221321.000Z").await;
    assert_eq!((p2.objects_copied, p2.bytes_copied), (2, 3012), "{p2:?}");
    assert_eq!(store.list().await.unwrap().len(), 2);
    for set in [&first, &second] {
        assert!(store.verify(set, &Progress::default()).await.unwrap().is_empty());
    }
    let out = tmp.path().join("restored");
    download_part(&store, &second.id, &second.parts[0], &out, &Progress::default(), None)
        .await
        .unwrap();
    assert_eq!(std::fs::read(out.join("a.sst")).unwrap(), body(1, 20 << 20));

    // An object replaced behind EbbDB's back (through the store's own API, signed) is named
    // by verify and refused by a restore.
    let b = second.parts[0].files.iter().find(|f| f.name == "b.sst").unwrap();
    let raw = dest.open(false).unwrap();
    raw.put(&b.object.key(), body(5, 3000).into()).await.unwrap();
    let problems = store.verify(&second, &Progress::default()).await.unwrap();
    assert!(
        matches!(problems.as_slice(), [BackupError::Damaged { file, .. }] if file == "b.sst"),
        "{problems:?}"
    );
    let e = download_part(
        &store,
        &second.id,
        &second.parts[0],
        &tmp.path().join("r2"),
        &Progress::default(),
        None,
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains(&b.object.hash), "{e}");

    // Locks work on the store's own clock; pruning to no set removes every object.
    let lock = store.lock(LockKind::Shared, "x").await.unwrap();
    assert!(matches!(ebb_backup::prune::prune(&store, 0).await, Err(BackupError::Busy(_))));
    store.unlock(&lock).await;
    let report = ebb_backup::prune::prune(&store, 0).await.unwrap();
    assert_eq!(report.sets_removed.len(), 2);
    assert_eq!(report.objects_removed, 4);
    assert!(store.object_sizes().await.unwrap().is_empty());
}
