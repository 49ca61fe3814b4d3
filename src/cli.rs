//! The `sluice` command line (CONTRACT: The program).
// The arguments' doc comments are clap's help text, shown as written (`<project>` is a
// placeholder there, not an HTML tag).
#![allow(rustdoc::invalid_html_tags)]

use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use serde_json::json;

use crate::app::App;
use crate::config::{Billing, ConfigArgs, LogFormat, Mode, Settings};
use crate::domain::{password, random_token, Email, ProjectSlug, RawApiKey, Scope, ScopeSet};
use crate::store::{is_unique_violation, Db};

#[derive(Parser, Debug)]
#[command(name = "sluice", version, about = "Self-hostable live streaming and video on demand")]
pub struct Cli {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run everything in one process: API, playback origin, ingest, workers.
    Serve,
    /// Administration on the database named by the settings.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Print the OpenAPI document.
    Openapi,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Create a project, its admin user (prints the password) and a `*` API key (prints the key).
    Bootstrap {
        #[arg(long)]
        project: String,
        /// The admin's e-mail (default admin@<project>.localhost). An existing user is reused.
        #[arg(long)]
        email: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Add a new signing key for signed URLs (playback tickets, upload targets). Running
    /// processes pick it up without a restart; the older keys keep verifying what they signed.
    RotateSigningKey,
    /// Show or change a project's credits, its balance of live seconds (used with
    /// `SLUICE_BILLING=on`). Durations are like `90s`, `10m`, `2h` or `1h30m`.
    Credits {
        #[arg(long)]
        project: String,
        /// Add this much live time to the balance.
        #[arg(long, conflicts_with = "set")]
        add: Option<String>,
        /// Set the balance to this much live time.
        #[arg(long)]
        set: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List the nodes sharing this database, their live sessions and load (as
    /// `GET /v1/admin/nodes` does).
    Nodes {
        #[arg(long)]
        json: bool,
    },
    /// Create an API key for a project and print it.
    CreateKey {
        #[arg(long)]
        project: String,
        /// Comma-separated scopes (default `*`).
        #[arg(long, value_delimiter = ',')]
        scopes: Option<Vec<String>>,
        #[arg(long)]
        label: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Openapi => {
            use std::io::Write;
            let spec = crate::api::spec_json(&crate::api::service());
            match std::io::stdout().lock().write_all(spec.as_bytes()) {
                // A reader that stops early (`sluice openapi | cmp -s - file`) is not an error.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(()),
            }
        }
        Command::Serve => {
            let settings = Settings::resolve(&cli.config)?;
            init_logging(settings.log_format);
            serve(settings).await
        }
        Command::Admin { command } => {
            let settings = Settings::resolve(&cli.config)?;
            crate::app::prepare_data_dir(&settings.data_dir)?;
            let db = Db::connect(&settings.database_url).await?;
            let result = match command {
                AdminCommand::Bootstrap { project, email, json } => {
                    bootstrap(&db, &project, email, json).await
                }
                AdminCommand::CreateKey { project, scopes, label, json } => {
                    create_key(&db, &project, scopes, label, json).await
                }
                AdminCommand::Credits { project, add, set, json } => {
                    credits(&db, &project, add, set, settings.billing, json).await
                }
                AdminCommand::Nodes { json } => nodes(&db, settings.node_timeout, json).await,
                AdminCommand::RotateSigningKey => match async {
                    let master = crate::app::master_key(&settings)?;
                    db.add_signing_key(&master).await.map_err(anyhow::Error::from)
                }
                .await
                {
                    Ok(kid) => {
                        println!("new signing key {kid}: running processes sign with it within a minute");
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
            };
            db.close().await;
            result
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    tracing::info!(?settings, "starting");
    if settings.mode == Mode::Production && !settings.clients_use_tls() {
        tracing::warn!(
            "NO TLS: API keys, push passwords and session cookies cross the network in clear. Set \
             SLUICE_TLS_CERT and SLUICE_TLS_KEY to serve HTTPS and RTMPS here, or, when TLS ends at a \
             reverse proxy, set SLUICE_PUBLIC_URL=https://… (and SLUICE_TRUSTED_PROXIES) — see docs/tls.md"
        );
    }
    let app = App::build(settings).await?;
    let drain = app.clone();
    let (addr, server) = app
        .start(async move {
            shutdown_signal().await;
            drain.end_followers();
            // Pushes end while HTTP still serves, so viewers get the ended playlists; running
            // transcodes stop and go back to the queue.
            tokio::join!(drain.drain_live(Duration::from_secs(5)), drain.drain_vod(Duration::from_secs(10)));
            drain.drain_meter().await;
        })
        .await?;
    tracing::info!(%addr, public_url = %app.settings.public_url, rtmp = ?app.rtmp_addr(), "serving HTTP and RTMP");
    if let Some(rtmps) = app.rtmps_addr() {
        tracing::info!(%rtmps, "serving RTMPS");
    }
    if let Some(srt) = app.srt_addr() {
        tracing::info!(%srt, "serving SRT ingest");
    }
    server.await.context("server task")?.context("HTTP server")?;
    app.db.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown requested; draining");
}

/// What `admin bootstrap` made. The password is `None` when the user existed already.
pub struct Bootstrapped {
    pub project_slug: String,
    pub email: String,
    pub password: Option<String>,
    pub key: RawApiKey,
    pub scopes: ScopeSet,
}

/// Creates a project, its admin (reusing an existing account of that e-mail) and a `*` key.
pub async fn bootstrap_project(
    db: &Db,
    project: &str,
    email: Option<String>,
) -> anyhow::Result<Bootstrapped> {
    let slug = ProjectSlug::parse(project).map_err(|e| anyhow::anyhow!("--project {e}"))?;
    let email = Email::parse(&email.unwrap_or_else(|| format!("admin@{}.localhost", slug.as_str())))
        .map_err(|e| anyhow::anyhow!("--email {e}"))?;
    if db.project_by_slug(slug.as_str()).await?.is_some() {
        bail!("project {} exists already", slug.as_str());
    }
    let (user, password) = match db.user_by_email(email.as_str()).await? {
        Some(user) => (user, None),
        None => {
            let pw = random_token(24);
            let user = db.create_user(email.as_str(), &password::hash_async(pw.clone()).await?).await?;
            (user, Some(pw))
        }
    };
    let created = match db.create_project(slug.as_str(), slug.as_str(), &user.id).await {
        Err(e) if is_unique_violation(&e) => bail!("project {} exists already", slug.as_str()),
        other => other?,
    };
    let key = RawApiKey::generate();
    let scopes = ScopeSet::all();
    db.create_api_key(&created.id, "bootstrap", key.prefix(), &key.hash().0, &scopes).await?;
    Ok(Bootstrapped { project_slug: created.slug, email: user.email, password, key, scopes })
}

async fn bootstrap(db: &Db, project: &str, email: Option<String>, as_json: bool) -> anyhow::Result<()> {
    let b = bootstrap_project(db, project, email).await?;
    if as_json {
        let out = json!({
            "project": {"slug": b.project_slug},
            "user": {"email": b.email, "password": b.password},
            "apiKey": {"key": b.key.expose(), "prefix": b.key.prefix(), "scopes": scope_names(&b.scopes)},
        });
        println!("{out}");
    } else {
        println!("project:  {}", b.project_slug);
        println!("user:     {}", b.email);
        match &b.password {
            Some(pw) => println!("password: {pw}   (shown once)"),
            None => println!("password: (existing user; unchanged)"),
        }
        println!("API key:  {}   (shown once; scopes: *)", b.key.expose());
    }
    Ok(())
}

async fn create_key(
    db: &Db,
    project: &str,
    scopes: Option<Vec<String>>,
    label: Option<String>,
    as_json: bool,
) -> anyhow::Result<()> {
    let project = db.project_by_slug(project).await?.with_context(|| format!("no project {project}"))?;
    let scopes = match scopes {
        None => ScopeSet::all(),
        Some(names) => ScopeSet::new(
            names
                .iter()
                .map(|n| n.trim().parse::<Scope>().map_err(|e| anyhow::anyhow!("--scopes {n}: {e}")))
                .collect::<anyhow::Result<Vec<_>>>()?,
        ),
    };
    if scopes.as_slice().is_empty() {
        bail!("--scopes needs at least one scope");
    }
    let label = label.unwrap_or_default();
    if label.chars().count() > 100 {
        bail!("--label must be at most 100 characters");
    }
    let key = RawApiKey::generate();
    db.create_api_key(&project.id, &label, key.prefix(), &key.hash().0, &scopes).await?;
    if as_json {
        println!(
            "{}",
            json!({"apiKey": {"key": key.expose(), "prefix": key.prefix(), "scopes": scope_names(&scopes), "label": label}})
        );
    } else {
        println!("API key: {}   (shown once; scopes: {})", key.expose(), scope_names(&scopes).join(","));
    }
    Ok(())
}

/// What `admin credits` changes: added to the balance, or the balance set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CreditChange {
    Add(i64),
    Set(i64),
}

/// Reads `--add` / `--set` (clap lets one at most through).
fn credit_change(add: Option<String>, set: Option<String>) -> anyhow::Result<Option<CreditChange>> {
    let seconds = |flag: &str, d: &str| {
        crate::domain::credits::parse_duration(d).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
    };
    Ok(match (add, set) {
        (Some(d), _) => Some(CreditChange::Add(seconds("add", &d)?)),
        (None, Some(d)) => Some(CreditChange::Set(seconds("set", &d)?)),
        (None, None) => None,
    })
}

/// `{"project": SLUG, "balanceSeconds": N, "billing": "on"|"off"}` (CONTRACT: Recording and
/// credits).
fn credits_json(project: &str, balance_ms: i64, billing: Billing) -> serde_json::Value {
    json!({
        "project": project,
        "balanceSeconds": crate::domain::credits::seconds_of(balance_ms),
        "billing": billing.as_str(),
    })
}

async fn credits(
    db: &Db,
    project: &str,
    add: Option<String>,
    set: Option<String>,
    billing: Billing,
    as_json: bool,
) -> anyhow::Result<()> {
    let change = credit_change(add, set)?;
    let project = db.project_by_slug(project).await?.with_context(|| format!("no project {project}"))?;
    let balance = match change {
        Some(CreditChange::Add(seconds)) => db.add_credits(&project.id, seconds * 1000).await?,
        Some(CreditChange::Set(seconds)) => {
            db.set_credits(&project.id, seconds * 1000).await?;
            seconds * 1000
        }
        None => db.credit_balance(&project.id).await?,
    };
    if as_json {
        println!("{}", credits_json(&project.slug, balance, billing));
    } else {
        println!("project:  {}", project.slug);
        println!("balance:  {} s of live time", crate::domain::credits::seconds_of(balance));
        match billing {
            Billing::On => println!("billing:  on"),
            Billing::Off => {
                println!("billing:  off (SLUICE_BILLING=on meters live time against this balance)")
            }
        }
    }
    Ok(())
}

async fn nodes(db: &Db, timeout: u64, as_json: bool) -> anyhow::Result<()> {
    use poem_openapi::types::ToJSON;
    let views = crate::services::nodes::list(db, std::time::Duration::from_secs(timeout)).await?;
    let nodes: Vec<crate::api::admin::Node> = views.into_iter().map(Into::into).collect();
    if as_json {
        let list = crate::api::admin::NodeList { nodes };
        println!("{}", list.to_json().unwrap_or_default());
        return Ok(());
    }
    if nodes.is_empty() {
        println!("no node has joined (a node joins when `sluice serve` starts)");
    }
    for n in nodes {
        let state = if n.alive { "alive" } else { "gone" };
        println!(
            "{}  {state:5}  {}  heartbeat {}  live {}  viewers {}  cpu {:.1}%  load {:.2}",
            n.id,
            n.internal_url,
            n.heartbeat_at,
            n.load.live_sessions,
            n.load.viewers,
            n.load.cpu_percent,
            n.load.load1
        );
        for s in n.sessions {
            println!("    stream {} (project {})", s.stream_id, s.project_id);
        }
    }
    Ok(())
}

fn scope_names(scopes: &ScopeSet) -> Vec<&'static str> {
    scopes.as_slice().iter().map(|s| s.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_changes() {
        assert_eq!(credit_change(Some("90s".into()), None).ok(), Some(Some(CreditChange::Add(90))));
        assert_eq!(credit_change(None, Some("2h".into())).ok(), Some(Some(CreditChange::Set(7200))));
        assert_eq!(credit_change(None, None).ok(), Some(None));
        let bad = credit_change(Some("ten minutes".into()), None).err().map(|e| e.to_string());
        assert!(bad.is_some_and(|e| e.starts_with("--add: ")));
    }

    #[test]
    fn credits_print_the_contracts_json() {
        let printed = credits_json("demo", 89_500, Billing::On).to_string();
        assert_eq!(printed, r#"{"project":"demo","balanceSeconds":90,"billing":"on"}"#);
        assert_eq!(credits_json("demo", -2_000, Billing::Off)["balanceSeconds"], -2);
        assert_eq!(credits_json("demo", 0, Billing::Off)["billing"], "off");
    }
}
