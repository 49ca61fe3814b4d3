use clap::Parser;

/// mimalloc rather than glibc's malloc: the origin allocates and frees a little per request on
/// two threads at once, where glibc's arenas spent a tenth of a playlist answer's CPU
/// (benches/origin; docs/live-hls.md). GStreamer's own buffers still come from glib.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = sluice::cli::Cli::parse();
    match sluice::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
