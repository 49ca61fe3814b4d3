//! The store itself, on SQLite and on Postgres: migrations, constraints, the SQLite pragmas.

use sluice::domain::ScopeSet;
use sluice::store::{is_unique_violation, Backend, Db};

use crate::support::fresh_postgres_url;

async fn fresh(backend: Backend) -> (Db, String, Option<tempfile::TempDir>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}/nested/dir/sluice.db", dir.path().display());
            (Db::connect(&url).await.unwrap(), url, Some(dir))
        }
        Backend::Postgres => {
            let url = fresh_postgres_url().await;
            (Db::connect(&url).await.unwrap(), url, None)
        }
    }
}

async fn migrations_are_idempotent_and_constraints_hold(backend: Backend) {
    let (db, url, _dir) = fresh(backend).await;
    assert_eq!(db.backend(), backend);
    // A second process connecting applies nothing twice.
    let again = Db::connect(&url).await.unwrap();
    let (applied,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations").fetch_one(again.pool()).await.unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/store/migrations"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sql"))
        .count();
    assert_eq!(applied as usize, files, "each migration applied exactly once");

    // Unique slugs, e-mails and key hashes are enforced by the database.
    let user = db.create_user("a@example.com", "hash").await.unwrap();
    let err = db.create_user("a@example.com", "hash").await.unwrap_err();
    assert!(is_unique_violation(&err), "{err}");
    let project = db.create_project("alpha", "Alpha", &user.id).await.unwrap();
    let err = db.create_project("alpha", "Alpha", &user.id).await.unwrap_err();
    assert!(is_unique_violation(&err), "{err}");
    db.create_api_key(&project.id, "", "svc_aaaaaaaa", "h1", &ScopeSet::all()).await.unwrap();
    let err = db.create_api_key(&project.id, "", "svc_aaaaaaaa", "h1", &ScopeSet::all()).await.unwrap_err();
    assert!(is_unique_violation(&err), "{err}");

    // A failed transaction leaves nothing behind: the project insert was rolled back.
    let err = db.create_project("beta", "Beta", "no-such-user").await.unwrap_err();
    assert!(err.as_database_error().is_some(), "foreign key refused: {err}");
    assert!(db.project_by_slug("beta").await.unwrap().is_none());

    // Foreign keys are on, also on SQLite.
    let res = sqlx::query(
        "INSERT INTO memberships (project_id, user_id, role, created_at) VALUES ($1, $2, 'viewer', 0)",
    )
    .bind("missing-project")
    .bind(&user.id)
    .execute(db.pool())
    .await;
    assert!(res.is_err(), "foreign key enforced");
}

async fn sqlite_runs_in_wal_mode() {
    let (db, _url, _dir) = fresh(Backend::Sqlite).await;
    let (mode,): (String,) = sqlx::query_as("PRAGMA journal_mode").fetch_one(db.pool()).await.unwrap();
    assert_eq!(mode, "wal");
    let (fk,): (i64,) = sqlx::query_as("PRAGMA foreign_keys").fetch_one(db.pool()).await.unwrap();
    assert_eq!(fk, 1);
}

#[tokio::test]
async fn migrations_and_constraints_sqlite() {
    migrations_are_idempotent_and_constraints_hold(Backend::Sqlite).await;
}

#[tokio::test]
async fn migrations_and_constraints_postgres() {
    migrations_are_idempotent_and_constraints_hold(Backend::Postgres).await;
}

#[tokio::test]
async fn sqlite_wal_and_foreign_keys() {
    sqlite_runs_in_wal_mode().await;
}

/// Content keys: the first stored for a resource wins (two processes creating one at once agree),
/// and the policy cache hands out the same key, unwrapped with the master key.
async fn content_keys_first_one_wins(backend: Backend) {
    use sluice::domain::content_key::MasterKey;
    use sluice::playback::{Policies, Resource};
    let (db, _url, _dir) = fresh(backend).await;
    assert_eq!(db.content_key("vod:a").await.unwrap(), None);
    let first = db.insert_content_key("vod:a", "first").await.unwrap();
    let second = db.insert_content_key("vod:a", "second").await.unwrap();
    assert_eq!((first.as_str(), second.as_str()), ("first", "first"));

    let master = MasterKey::random();
    let (one, two) = (Policies::new(db.clone(), master.clone()), Policies::new(db.clone(), master.clone()));
    let resource = Resource::Stream("s1");
    assert_eq!(one.content_key(&resource, false).await.unwrap(), None, "not created");
    let created = one.content_key(&resource, true).await.unwrap().expect("created");
    let read = two.content_key(&resource, false).await.unwrap().expect("stored");
    assert_eq!(created, read, "another process reads the same key");
    let wrapped = db.content_key("stream:s1").await.unwrap().expect("stored");
    assert!(!wrapped.contains(&hex::encode(created.0)), "stored wrapped");
    let other = MasterKey::random();
    assert!(
        Policies::new(db.clone(), other).content_key(&resource, false).await.is_err(),
        "another master key fails"
    );
}

#[tokio::test]
async fn content_keys_sqlite() {
    content_keys_first_one_wins(Backend::Sqlite).await;
}

#[tokio::test]
async fn content_keys_postgres() {
    content_keys_first_one_wins(Backend::Postgres).await;
}

/// What a database error means to its caller (`store::fault`): a statement past its deadline,
/// SQLite busy, and a closed pool are unavailable (503 at the API); a broken constraint is not.
async fn faults_are_classified(backend: Backend) {
    use sluice::store::{fault, Fault};
    let (db, _url, _dir) = fresh(backend).await;
    let taken =
        sqlx::query("INSERT INTO users (id, email, password_hash, created_at) VALUES ('u', 'a@b.c', 'x', 0)");
    taken.execute(db.pool()).await.unwrap();
    let again =
        sqlx::query("INSERT INTO users (id, email, password_hash, created_at) VALUES ('u', 'a@b.c', 'x', 0)")
            .execute(db.pool())
            .await
            .unwrap_err();
    assert_eq!(fault(&again), Fault::Other, "{again}");
    if backend == Backend::Postgres {
        let mut tx = db.pool().begin().await.unwrap();
        sqlx::query("SET LOCAL statement_timeout = 50").execute(&mut *tx).await.unwrap();
        let slow = sqlx::query("SELECT pg_sleep(1)").execute(&mut *tx).await.unwrap_err();
        assert_eq!(fault(&slow), Fault::Unavailable, "{slow}");
    } else {
        // A second writer while the first holds the lock, with no time to wait.
        let mut first = db.begin_write().await.unwrap();
        sqlx::query("UPDATE users SET email = 'd@e.f'").execute(&mut *first).await.unwrap();
        let mut second = db.pool().acquire().await.unwrap();
        sqlx::query("PRAGMA busy_timeout = 0").execute(&mut *second).await.unwrap();
        let busy = sqlx::query("UPDATE users SET email = 'g@h.i'").execute(&mut *second).await.unwrap_err();
        assert_eq!(fault(&busy), Fault::Unavailable, "{busy}");
        sqlx::query("PRAGMA busy_timeout = 10000").execute(&mut *second).await.unwrap();
        first.rollback().await.unwrap();
    }
    db.close().await;
    let closed = sqlx::query("SELECT 1").execute(db.pool()).await.unwrap_err();
    assert_eq!(fault(&closed), Fault::Unavailable, "{closed}");
}

#[tokio::test]
async fn faults_sqlite() {
    faults_are_classified(Backend::Sqlite).await;
}

#[tokio::test]
async fn faults_postgres() {
    faults_are_classified(Backend::Postgres).await;
}

/// Viewer reports (CONTRACT: Viewers): each node's rows replace its last ones, the sum counts
/// fresh reports only, a session's peak only rises and a new session starts its own, and VOD
/// views add up.
async fn viewer_reports_sum_and_peaks_rise(backend: Backend) {
    use sluice::store::viewers::ViewerCounts;
    let (db, _url, _dir) = fresh(backend).await;
    let c = |hls, webrtc, rtsp| ViewerCounts { hls, webrtc, rtsp };
    db.report_viewers("a", &[("s".into(), c(3, 1, 0)), ("t".into(), c(1, 0, 0))], 1_000).await.unwrap();
    db.report_viewers("b", &[("s".into(), c(2, 0, 2))], 1_000).await.unwrap();
    db.report_viewers("stale", &[("s".into(), c(100, 0, 0))], 10).await.unwrap();
    let sums = db.viewer_counts(&["s", "t", "u"], 500).await.unwrap();
    assert_eq!(sums.get("s"), Some(&c(5, 1, 2)));
    assert_eq!(sums.get("t"), Some(&c(1, 0, 0)));
    assert_eq!(sums.get("u"), None);
    // Node a reports again without t: its row of t is gone.
    db.report_viewers("a", &[("s".into(), c(1, 0, 0))], 2_000).await.unwrap();
    let sums = db.viewer_counts(&["s", "t"], 500).await.unwrap();
    assert_eq!((sums.get("s"), sums.get("t")), (Some(&c(3, 0, 2)), None));

    db.raise_viewer_peak("s", "one", 8, 1_000).await.unwrap();
    db.raise_viewer_peak("s", "one", 5, 2_000).await.unwrap();
    assert_eq!(db.viewer_peaks(&["s"]).await.unwrap().get("s"), Some(&8));
    db.raise_viewer_peak("s", "two", 2, 3_000).await.unwrap();
    assert_eq!(db.viewer_peaks(&["s", "x"]).await.unwrap(), [("s".to_string(), 2)].into());
    let peaks = db.session_viewer_peaks(&[("s", "one"), ("s", "three"), ("t", "one")]).await.unwrap();
    assert_eq!(peaks, [(("s".to_string(), "one".to_string()), 8)].into());
}

#[tokio::test]
async fn viewer_reports_sqlite() {
    viewer_reports_sum_and_peaks_rise(Backend::Sqlite).await;
}

#[tokio::test]
async fn viewer_reports_postgres() {
    viewer_reports_sum_and_peaks_rise(Backend::Postgres).await;
}
