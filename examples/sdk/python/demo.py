"""Drive a live Sluice with the Python client generated from openapi/openapi.json.

Creates a stream, reads it back, lists streams with filters, registers a webhook that points at
a receiver this program runs and verifies a delivery's signature, creates a VOD, uploads a short
clip to its presigned URL and polls it to `complete`. Prints each check; exits 1 at the first
that fails.

    python demo.py --base-url http://127.0.0.1:8080 --project demo --key svc_...

(or SLUICE_URL, SLUICE_PROJECT, SLUICE_KEY). Webhook targets on loopback need the server in
`--mode development`. The client package `sluice_client` is generated beside this file by
`generate.sh`; see README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, NoReturn

import httpx

from sluice_client import AuthenticatedClient
from sluice_client.api.streams import (
    create_simulcast_target,
    create_stream,
    delete_simulcast_target,
    delete_stream,
    get_stream,
    list_simulcast_targets,
    list_streams,
    update_simulcast_target,
)
from sluice_client.api.vod import create_vod, get_vod, mark_vod_uploaded
from sluice_client.api.webhooks import (
    create_webhook,
    delete_webhook,
    list_events,
    list_webhook_deliveries,
    test_webhook,
)
from sluice_client.models import (
    ClipOfVod,
    CreateSimulcastTarget,
    CreateStream,
    CreateVod,
    CreateWebhook,
    DeliveryStatus,
    EventFilter,
    ListEventsType,
    Quality,
    RenditionSpec,
    StreamStatus,
    TargetStatus,
    UpdateSimulcastTarget,
    UploadTarget,
    VodStatus,
)
from sluice_client.types import Response


def fail(message: str) -> NoReturn:
    print(f"FAIL {message}", flush=True)
    sys.exit(1)


def ok(message: str) -> None:
    print(f"ok   {message}", flush=True)


def check(condition: bool, message: str) -> None:
    if not condition:
        fail(message)
    ok(message)


def expect(response: Response[Any], status: int, what: str) -> Any:
    """The parsed body of a response that must have `status`; anything else fails the run."""
    if response.status_code != status:
        body = response.content.decode("utf-8", "replace")[:500]
        fail(f"{what}: expected {status}, got {int(response.status_code)}: {body}")
    if response.parsed is None:
        fail(f"{what}: the client could not parse the {status} body")
    return response.parsed


# --- the webhook receiver -------------------------------------------------------------------


class Receiver:
    """A tiny HTTP server on loopback that keeps every POST it gets (raw bytes and headers)."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[dict[str, str], bytes]] = []
        self.arrived = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver.arrived:
                    receiver.deliveries.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    receiver.arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/sluice"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, event: str, timeout: float, match: Any = None) -> tuple[dict[str, str], bytes]:
        """The first delivery of `event` (whose envelope satisfies `match`) within `timeout`."""

        def find() -> tuple[dict[str, str], bytes] | None:
            for headers, body in self.deliveries:
                if headers.get("x-service-event") == event and (match is None or match(json.loads(body))):
                    return headers, body
            return None

        with self.arrived:
            found = self.arrived.wait_for(find, timeout=timeout)
        if found is None:
            fail(f"no {event} delivery reached the receiver within {timeout:.0f} s")
        return found

    def close(self) -> None:
        self.server.shutdown()


def verify_signature(secret: str, headers: dict[str, str], body: bytes, event: str) -> None:
    """`X-Service-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>`."""
    signature = headers.get("x-service-signature", "")
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    check(hmac.compare_digest(signature, expected), f"{event}: X-Service-Signature verifies")
    envelope = json.loads(body)
    check(envelope.get("event") == event, f"{event}: the signed envelope names the event")
    check(
        envelope.get("id") == headers.get("x-service-delivery"),
        f"{event}: envelope id equals X-Service-Delivery ({envelope.get('id')})",
    )


# --- media ----------------------------------------------------------------------------------


def make_clip(folder: str) -> str:
    """A 2-second H.264/AAC MP4 (test pattern and a tone), made with ffmpeg."""
    path = os.path.join(folder, "sdk-clip.mp4")
    command = (
        "ffmpeg -hide_banner -loglevel error -nostdin -y"
        " -f lavfi -i testsrc=size=640x360:rate=25:duration=2 -f lavfi -i sine=frequency=440:duration=2"
        " -c:v libx264 -preset ultrafast -pix_fmt yuv420p -c:a aac -shortest -movflags +faststart"
    )
    subprocess.run([*command.split(), path], check=True)
    return path


# --- the walk-through -----------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default=os.environ.get("SLUICE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--project", default=os.environ.get("SLUICE_PROJECT", "demo"))
    parser.add_argument("--key", default=os.environ.get("SLUICE_KEY"))
    parser.add_argument("--media", help="a short video file to upload (default: made with ffmpeg)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds allowed for the VOD")
    args = parser.parse_args()
    if not args.key:
        parser.error("an API key is needed: --key or SLUICE_KEY")

    slug = args.project
    run = uuid.uuid4().hex[:8]
    client = AuthenticatedClient(base_url=args.base_url, token=args.key, timeout=httpx.Timeout(30))
    receiver = Receiver()
    workdir = tempfile.mkdtemp(prefix="sluice-sdk-py-")

    with client:
        # Streams: create, read back, list with filters.
        before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)

        # With an Idempotency-Key a create can be retried safely (a lost answer, a timeout): the
        # retry gets the first answer, without its raw secrets, and no second stream is made.
        def create_once() -> Response[Any]:
            return create_stream.sync_detailed(
                slug,
                client=client,
                idempotency_key=f"sdk-python-{run}",
                body=CreateStream(
                    name=f"sdk-python-{run}", qualities=[Quality("480p")], dvr_enabled=True, dvr_duration=600
                ),
            )

        created = expect(create_once(), 201, "create stream")
        ingest_url = created.ingest_url if isinstance(created.ingest_url, str) else fail("create stream: no ingestUrl")
        check(
            ingest_url.startswith("rtmp"),
            f"create stream {created.field_id}: ingestUrl {ingest_url.split('?')[0]}…",
        )
        check(bool(created.push_password), "create stream: the push password is in the create response")
        retry = create_once()
        replayed = expect(retry, 201, "create stream again with the same Idempotency-Key")
        check(
            retry.headers.get("idempotent-replayed") == "true" and replayed.field_id == created.field_id,
            f"create stream retried with its Idempotency-Key: the same stream {replayed.field_id}, replayed",
        )
        check(replayed.push_password is None, "the replayed answer leaves the push password out")
        after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)

        got = expect(get_stream.sync_detailed(slug, created.field_id, client=client), 200, "get stream")
        check(got.name == created.name and got.stream_key == created.stream_key, "get stream: same name and stream key")
        check(got.status == StreamStatus.IDLE, f"get stream: status {got.status.value}")
        check(
            got.viewers == 0 and got.viewer_counts.hls == 0 and got.peak_viewers == 0,
            f"get stream: no viewers yet ({got.viewers}, peak {got.peak_viewers})",
        )
        check(
            got.dvr_duration == 600 and [q.value for q in got.qualities] == ["480p"],
            "get stream: the options as created",
        )

        page = expect(
            list_streams.sync_detailed(
                slug,
                client=client,
                q=created.name.upper(),
                status=StreamStatus.IDLE,
                from_=before,
                to=after,
                limit=5,
            ),
            200,
            "list streams",
        )
        check(
            page.total == 1 and page.items[0].field_id == created.field_id,
            "list streams q+status+from+to: exactly the new stream (once)",
        )

        # The event log: the creation is in it, once, with its cursor.
        events = expect(
            list_events.sync_detailed(slug, client=client, type_=ListEventsType("stream.created"), limit=500),
            200,
            "read the event log",
        )
        mine = [e for e in events.items if isinstance(e.data, dict) and e.data.get("id") == created.field_id]
        check(
            len(mine) == 1 and isinstance(events.next_, str),
            f"event log: stream.created of {created.field_id} once, next {events.next_}",
        )
        page = expect(
            list_streams.sync_detailed(slug, client=client, q=created.name, status=StreamStatus.LIVE),
            200,
            "list streams",
        )
        check(page.total == 0, "list streams status=live: not the idle stream")
        page = expect(list_streams.sync_detailed(slug, client=client, q=created.name, from_=after), 200, "list streams")
        check(page.total == 0, "list streams from=<after its creation>: not listed")
        page = expect(list_streams.sync_detailed(slug, client=client, to=after.date(), limit=1), 200, "list streams")
        check(page.limit == 1 and len(page.items) == 1, "list streams to=<a date: today>, limit=1: one page of one")

        # Simulcast: a target on the stream, its key shown masked; disabled, listed, removed.
        target = expect(
            create_simulcast_target.sync_detailed(
                slug,
                created.field_id,
                client=client,
                body=CreateSimulcastTarget(url="rtmp://a.rtmp.youtube.com/live2/sdk-secret-key", name="YouTube"),
            ),
            201,
            "create simulcast target",
        )
        check(
            target.url == "rtmp://a.rtmp.youtube.com:1935/live2/sdk-****" and target.status == TargetStatus.IDLE,
            f"simulcast target {target.field_id}: {target.url}, {target.status.value}",
        )
        disabled = expect(
            update_simulcast_target.sync_detailed(
                slug, created.field_id, target.field_id, client=client, body=UpdateSimulcastTarget(enabled=False)
            ),
            200,
            "disable simulcast target",
        )
        check(disabled.enabled is False, "simulcast target disabled")
        targets = expect(
            list_simulcast_targets.sync_detailed(slug, created.field_id, client=client), 200, "list simulcast targets"
        )
        check(
            len(targets.items) == 1 and targets.items[0].field_id == target.field_id, "simulcast targets: the one"
        )
        removed = delete_simulcast_target.sync_detailed(slug, created.field_id, target.field_id, client=client)
        check(removed.status_code == 204, f"delete simulcast target: {int(removed.status_code)}")

        # Webhooks: register the receiver, ask for a test ping, verify its signature.
        webhook = expect(
            create_webhook.sync_detailed(
                slug,
                client=client,
                body=CreateWebhook(url=receiver.url, events=[EventFilter("*")], description=f"sdk python {run}"),
            ),
            201,
            "create webhook",
        )
        check(len(webhook.secret) == 32, f"create webhook {webhook.field_id}: a 32-character secret")
        expect(test_webhook.sync_detailed(slug, webhook.field_id, client=client), 201, "test webhook")
        headers, body = receiver.wait_for("webhook.test", 30)
        verify_signature(webhook.secret, headers, body, "webhook.test")
        tampered = body.replace(b"webhook.test", b"webhook.tesT")
        check(
            not hmac.compare_digest(
                headers["x-service-signature"],
                "sha256=" + hmac.new(webhook.secret.encode(), tampered, hashlib.sha256).hexdigest(),
            ),
            "webhook.test: a changed body does not verify",
        )
        delivery_id = headers["x-service-delivery"]
        deadline = time.monotonic() + 15
        while True:
            log = expect(
                list_webhook_deliveries.sync_detailed(slug, client=client, webhook_id=webhook.field_id),
                200,
                "list deliveries",
            )
            mine = [d for d in log.items if d.field_id == delivery_id]
            if mine and mine[0].status == DeliveryStatus.SUCCESS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(
            bool(mine) and mine[0].status == DeliveryStatus.SUCCESS and mine[0].response_code == 204,
            f"delivery log: {delivery_id} succeeded with 204",
        )

        # VOD: create, upload to the presigned URL, mark uploaded, poll to complete.
        media = args.media or make_clip(workdir)
        created_vod = expect(
            create_vod.sync_detailed(
                slug,
                client=client,
                body=CreateVod(
                    name=f"sdk-python-{run}",
                    filename=os.path.basename(media),
                    ladder=[RenditionSpec(name="360p", width=640, height=360, video_bitrate="800k")],
                ),
            ),
            201,
            "create VOD",
        )
        vod_id = created_vod.vod.field_id
        check(created_vod.vod.status == VodStatus.PENDING_UPLOAD, f"create VOD {vod_id}: status pending_upload")
        with open(media, "rb") as f:
            data = f.read()
        upload = created_vod.upload
        if not isinstance(upload, UploadTarget):
            fail("a VOD to upload has no upload target")
        put = httpx.request(upload.method, upload.url, content=data, timeout=60)
        check(
            put.status_code == 200,
            f"upload {len(data)} bytes with {upload.method} to the presigned URL: {put.status_code}",
        )
        marked = expect(mark_vod_uploaded.sync_detailed(slug, vod_id, client=client), 200, "mark uploaded")
        check(
            marked.status not in (VodStatus.FAILED, VodStatus.CANCELLED), f"mark uploaded: status {marked.status.value}"
        )

        seen = [VodStatus.PENDING_UPLOAD, marked.status]
        deadline = time.monotonic() + args.timeout
        while True:
            vod = expect(get_vod.sync_detailed(slug, vod_id, client=client), 200, "get VOD")
            if vod.status != seen[-1]:
                seen.append(vod.status)
                print(f"     VOD {vod_id}: {vod.status.value} ({vod.progress} %)", flush=True)
            if vod.status == VodStatus.COMPLETE:
                break
            if vod.status in (VodStatus.FAILED, VodStatus.CANCELLED):
                fail(f"VOD {vod_id} ended {vod.status.value}: {vod.error}")
            if time.monotonic() > deadline:
                fail(
                    f"VOD {vod_id} not complete within {args.timeout:.0f} s (status {vod.status.value}, {vod.progress} %)"
                )
            time.sleep(0.5)
        check(
            isinstance(vod.completed_at, dt.datetime),
            f"VOD complete at {vod.completed_at} ({' → '.join(s.value for s in seen)})",
        )
        check([r.name for r in vod.renditions] == ["360p"], "VOD renditions: the one rung asked for")
        playlist = httpx.get(vod.playback_url, timeout=30)
        check(
            playlist.status_code == 200 and playlist.text.startswith("#EXTM3U"),
            f"playbackUrl serves an HLS playlist ({vod.playback_url})",
        )
        deadline = time.monotonic() + 15
        while True:
            vod = expect(get_vod.sync_detailed(slug, vod_id, client=client), 200, "get VOD")
            if vod.views >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        check(vod.views == 1, f"get VOD: the playlist fetch counted as one view ({vod.views})")
        for event in ("vod.uploaded", "vod.processing", "vod.complete"):
            headers, body = receiver.wait_for(event, 30, lambda e: e["data"].get("id") == vod_id)
            verify_signature(webhook.secret, headers, body, event)

        # A clip of it: its first second, cut without a re-encode; nothing to upload.
        clipped = expect(
            create_vod.sync_detailed(
                slug,
                client=client,
                body=CreateVod(name=f"sdk-python-{run}-clip", clip=ClipOfVod(vod_id=vod_id, start_sec=0, end_sec=1)),
            ),
            201,
            "create clip",
        )
        clip_id = clipped.vod.field_id
        check(
            clipped.upload is None and isinstance(clipped.vod.clip_of, ClipOfVod) and clipped.vod.clip_of.vod_id == vod_id,
            f"create clip {clip_id} of {vod_id}: nothing to upload",
        )
        clip = clipped.vod
        deadline = time.monotonic() + args.timeout
        while clip.status != VodStatus.COMPLETE:
            time.sleep(0.5)
            clip = expect(get_vod.sync_detailed(slug, clip_id, client=client), 200, "get clip")
            if clip.status in (VodStatus.FAILED, VodStatus.CANCELLED):
                fail(f"clip {clip_id} ended {clip.status.value}: {clip.error}")
            if time.monotonic() > deadline:
                fail(f"clip {clip_id} not complete within {args.timeout:.0f} s (status {clip.status.value})")
        check(
            isinstance(clip.playback_url, str) and isinstance(clip.duration, float) and clip.duration > 0,
            f"clip complete: {clip.duration} s at {clip.playback_url}",
        )
        headers, body = receiver.wait_for("vod.complete", 30, lambda e: e["data"].get("id") == clip_id)
        verify_signature(webhook.secret, headers, body, "vod.complete")

        # Tidy up what this run made (the VOD stays, playable).
        expect(delete_webhook.sync_detailed(slug, webhook.field_id, client=client), 200, "delete webhook")
        gone = expect(delete_stream.sync_detailed(slug, created.field_id, client=client), 200, "delete stream")
        check(gone.status == StreamStatus.DISABLED, "delete stream: disabled")

    receiver.close()
    print("python SDK: every check passed", flush=True)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 (an exception the client raised is a failed run too)
        import traceback

        traceback.print_exc()
        fail(f"{type(error).__name__}: {error}")
