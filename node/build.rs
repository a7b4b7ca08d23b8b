//! Compiles the protos with protox (no system `protoc`): the cluster's gRPC services, and the
//! messages of Prometheus' remote write and read protocol. Records the commit the binary is
//! built from (`EBB_COMMIT`, which `ebb --version` prints).

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    commit();
    let fds = protox::compile(["proto/cluster.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Points are shared between a shard's check and its write, and retries, uncopied.
        .bytes(".ebb.cluster.v1.WritePointsRequest.points")
        .compile_fds(fds)?;
    let fds = protox::compile(["remote.proto"], ["proto/prometheus"])?;
    tonic_prost_build::configure().build_server(false).build_client(false).compile_fds(fds)?;
    Ok(())
}

/// Sets `EBB_COMMIT` for the crate: the environment's `EBB_COMMIT` (a build without the
/// repository, such as a container's, is given it), else the repository's `HEAD` (12 hex
/// digits), else `unknown`. Built again when `HEAD` moves.
fn commit() {
    println!("cargo:rerun-if-env-changed=EBB_COMMIT");
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    // What `HEAD` is: the file, the branch it names, and packed branches. Only files that
    // exist: cargo runs a build script every time when one it watches is missing.
    let watch = |path: Option<String>| {
        if let Some(path) = path.filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    };
    watch(git(&["rev-parse", "--git-path", "HEAD"]));
    watch(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(git(&["rev-parse", "--git-path", &branch]));
    }
    let commit = std::env::var("EBB_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=EBB_COMMIT={commit}");
}
