//! Compiles the protocol with protox (pure Rust: no protoc needed) and generates the
//! prost messages and tonic client and server.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/weir/config/v1/config.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
