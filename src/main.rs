use clap::Parser;

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
