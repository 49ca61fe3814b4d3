//! A transcode worker whose lease lapsed and was taken over deletes nothing (issue 21: every
//! write of a worker is fenced by its lease and attempt). The takeover is made in the database,
//! as another process's claim would make it; then that other worker "dies" and the job comes back,
//! and this process completes it from the source the stale worker left alone.

use std::time::Duration;

use serde_json::json;

use crate::support::{eventually, spawn_app, Backend};
use crate::vod::{create, finished, make_file, put_file, uploaded};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_lost_its_lease_deletes_nothing() {
    let app = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let file = make_file(dir.path(), "src.mp4", Some("testsrc=size=640x360:rate=25"), 20);
    let (vod, url) = create(&app, json!({"name": "lease", "filename": "src.mp4"})).await;
    let id = vod["_id"].as_str().unwrap().to_string();
    assert!(put_file(&app, &url, &file).await.status().is_success());
    assert!(uploaded(&app, &id).await.status().is_success());

    // The worker is transcoding (its work dir exists) when another worker takes the job over.
    let work = app.app.settings.data_dir.join("work").join(&id);
    eventually("the transcode to start", Duration::from_secs(30), || async { work.exists().then_some(()) })
        .await;
    let taken = sqlx::query(
        "UPDATE transcode_jobs SET lease_owner = 'another-node', attempts = attempts + 1, lease_until = $1 \
         WHERE vod_id = $2",
    )
    .bind(sluice::domain::time::now_ms() + 600_000)
    .bind(&id)
    .execute(app.db.pool())
    .await
    .unwrap();
    assert_eq!(taken.rows_affected(), 1);

    // The stale worker notices at its next renewal (or at completion) and stops.
    eventually("the stale worker to stop", Duration::from_secs(60), || async {
        (!work.exists()).then_some(())
    })
    .await;
    assert_eq!(
        crate::vod::get_vod(&app, &id).await["status"],
        "processing",
        "the record is the new holder's"
    );

    // The other worker dies: its lease is freed, this process takes the job up again and
    // completes it, which needs the source the stale worker must not have deleted.
    sqlx::query("UPDATE transcode_jobs SET lease_owner = NULL, lease_until = NULL WHERE vod_id = $1")
        .bind(&id)
        .execute(app.db.pool())
        .await
        .unwrap();
    let v = finished(&app, &id, Duration::from_secs(120)).await;
    assert_eq!(v["status"], "complete", "{v}");
    let thumb = app.client.get(v["thumbnailUrl"].as_str().unwrap()).send().await.unwrap();
    assert_eq!(thumb.status(), 200);
}

/// The job `uploaded` inserts is held back until the VOD is `queued` (the second write releases
/// it), so no worker moves the VOD on before the client's answer shows `queued`; a held job is
/// taken anyway once its hold lapses (a crash between the two writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_held_until_the_vod_is_queued() {
    use sluice::domain::time::now_ms;
    use sluice::store::Db;
    let app = crate::support::spawn_app_with(Backend::Sqlite, |a| a.transcode_workers = Some(0)).await;
    let (vod, _url) = create(&app, json!({"name": "held", "filename": "src.mp4"})).await;
    let id = vod["_id"].as_str().unwrap().to_string();
    let now = now_ms();
    let mut conn = app.db.pool().acquire().await.unwrap();
    Db::insert_job(&mut conn, &id, &app.project_id, now, now + 60_000).await.unwrap();
    assert!(app.db.claim_job("w", now, now + 30_000).await.unwrap().is_none(), "held");
    assert!(
        app.db.claim_job("w", now + 60_001, now + 90_000).await.unwrap().is_some(),
        "taken once the hold lapses"
    );
    sqlx::query("DELETE FROM transcode_jobs").execute(app.db.pool()).await.unwrap();
    Db::insert_job(&mut conn, &id, &app.project_id, now, now + 60_000).await.unwrap();
    Db::release_job(&mut conn, &id).await.unwrap();
    assert!(app.db.claim_job("w", now, now + 30_000).await.unwrap().is_some(), "released");
}

/// `queued` releases the held job at once: a worker takes it well within the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_taken_without_waiting_for_the_hold() {
    let app = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let file = make_file(dir.path(), "src.mp4", Some("testsrc=size=640x360:rate=25"), 4);
    let (vod, url) = create(&app, json!({"name": "prompt", "filename": "src.mp4"})).await;
    let id = vod["_id"].as_str().unwrap().to_string();
    assert!(put_file(&app, &url, &file).await.status().is_success());
    assert!(uploaded(&app, &id).await.status().is_success());
    eventually("a worker to take the job (the hold is 10 s)", Duration::from_secs(5), || async {
        (crate::vod::get_vod(&app, &id).await["status"] != "queued").then_some(())
    })
    .await;
}
