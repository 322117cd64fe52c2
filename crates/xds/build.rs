//! Compiles the protocol with protox (pure Rust: no protoc needed) and generates the
//! prost messages and tonic client and server.
//!
//! Also compiles `tests/proto/v0`, a frozen copy of the message set of the release before
//! protocol versions (version 0), into `$OUT_DIR/v0`: the compatibility test speaks it as
//! an older data plane would. Only the tests include it.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/weir/config/v1/config.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    let v0 = "tests/proto/v0/weir/config/v1/config.proto";
    println!("cargo:rerun-if-changed={v0}");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("v0");
    std::fs::create_dir_all(&out)?;
    let fds = protox::compile([v0], ["tests/proto/v0"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .out_dir(out)
        .compile_fds(fds)?;
    Ok(())
}
