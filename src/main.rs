use clap::Parser;

/// mimalloc rather than glibc's malloc: the origin allocates and frees a little per request on
/// two threads at once, where glibc's arenas spent a tenth of a playlist answer's CPU
/// (benches/origin; docs/live-hls.md). GStreamer's own buffers still come from glib.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// glibc's malloc, which GStreamer, x264 and libav allocate from, raises its mmap threshold each
/// time a large block is freed, so the frames of every push session after the first come from
/// its heaps, where they fragment: the resident size grew by about 20 MiB per ended 720p
/// session. A fixed threshold (which also stops that adjustment) keeps blocks over 128 KiB in
/// their own mappings, returned when freed (docs/operations.md, "Memory"; benches/churn). An
/// operator's `MALLOC_MMAP_THRESHOLD_` wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn fix_malloc_mmap_threshold() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets a parameter of the allocator; called before any thread starts.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fix_malloc_mmap_threshold();
    match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("sluice: starting the runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::process::ExitCode {
    let cli = sluice::cli::Cli::parse();
    match sluice::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
