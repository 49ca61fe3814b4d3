"""Creates what schemathesis works on in a live Sluice, and signs in (scripts/contract.sh).

    python3 seed.py BASE_URL PROJECT KEY EMAIL PASSWORD MEDIA  > seed.env

Prints `export NAME=value` lines:
- SEED_STREAM, SEED_VOD (waiting for its file), SEED_VOD_COMPLETE (MEDIA uploaded and transcoded),
  SEED_WEBHOOK, SEED_DELIVERY, SEED_MEMBER, SEED_TARGET_STREAM and its simulcast target
  SEED_TARGET: resources that stay, which the coverage and fuzzing
  phases bind `{id}` / `{user_id}` to, so that they reach the handlers instead of meeting 404;
- SLUICE_KEY_ID: the id of KEY, which the run must not revoke;
- SLUICE_SESSION: a session cookie for the operations only a signed-in user may call;
- SLUICE_REFRESH: a refresh cookie (of another sign-in) for `POST /v1/auth/refresh`.
Destructive operations get a fresh resource per request instead (hooks.py). Standard library only.
"""

from __future__ import annotations

import base64
import http.cookies
import json
import shlex
import sys
import time
import urllib.request
from typing import Any


def call(
    base: str, method: str, path: str, key: str | None, body: Any = None, raw: bytes | None = None
) -> tuple[Any, Any]:
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    url = path if path.startswith("http") else base + path
    request = urllib.request.Request(url, data=data, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null"), response.headers


def main() -> None:
    base, project, key, email, password, media = sys.argv[1:7]
    api = f"/v1/projects/{project}"
    out: dict[str, str] = {}

    stream, _ = call(base, "POST", f"{api}/streams", key, {"name": "contract-seed"})
    out["SEED_STREAM"] = stream["_id"]
    # Its own slate picture (a 16x16 PNG), so that `GET …/slate` on it answers 200.
    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAIAAACQkWg2AAAACXBIWXMAAAABAAAAAQBPJcTWAAAAFUlEQVR4nGNgqGcgDY1qGNUwfDUAAIZufwE07jNxAAAAAElFTkSuQmCC")
    request = urllib.request.Request(f"{base}{api}/streams/{stream['_id']}/slate", data=png, method="PUT")
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "image/png")
    urllib.request.urlopen(request, timeout=60).close()
    # A stream of its own with a simulcast target (never live: nothing is sent to it).
    target_stream, _ = call(base, "POST", f"{api}/streams", key, {"name": "contract-seed-simulcast"})
    out["SEED_TARGET_STREAM"] = target_stream["_id"]
    target, _ = call(
        base,
        "POST",
        f"{api}/streams/{target_stream['_id']}/simulcast-targets",
        key,
        {"url": "rtmp://203.0.113.7/live/contract-seed-key"},
    )
    out["SEED_TARGET"] = target["_id"]
    vod, _ = call(base, "POST", f"{api}/vod", key, {"name": "contract-seed", "filename": "seed.mp4"})
    out["SEED_VOD"] = vod["vod"]["_id"]

    ladder = [{"name": "240p", "width": 426, "height": 240, "videoBitrate": "400k"}]
    created, _ = call(
        base, "POST", f"{api}/vod", key, {"name": "contract-seed-complete", "filename": "clip.mp4", "ladder": ladder}
    )
    vod_id = created["vod"]["_id"]
    with open(media, "rb") as f:
        call(base, created["upload"]["method"], created["upload"]["url"], None, raw=f.read())
    call(base, "POST", f"{api}/vod/{vod_id}/uploaded", key)
    deadline = time.monotonic() + 180
    while True:
        vod, _ = call(base, "GET", f"{api}/vod/{vod_id}", key)
        if vod["status"] == "complete":
            break
        if vod["status"] in ("failed", "cancelled") or time.monotonic() > deadline:
            sys.exit(f"seed.py: the seed VOD did not complete: {vod['status']} {vod.get('error')}")
        time.sleep(0.3)
    out["SEED_VOD_COMPLETE"] = vod_id

    # Nothing listens on port 9: deliveries fail and are retried, as a real log shows too.
    webhook, _ = call(base, "POST", f"{api}/webhooks", key, {"url": "http://127.0.0.1:9/contract", "events": ["*"]})
    out["SEED_WEBHOOK"] = webhook["_id"]
    delivery, _ = call(base, "POST", f"{api}/webhooks/{webhook['_id']}/test", key)
    out["SEED_DELIVERY"] = delivery["_id"]
    member, _ = call(base, "POST", f"{api}/members", key, {"email": "contract-seed@example.com", "role": "viewer"})
    out["SEED_MEMBER"] = member["_id"]

    keys, _ = call(base, "GET", f"{api}/api-keys?limit=100", key)
    own = [k["_id"] for k in keys["items"] if key.startswith(k["prefix"])]
    if len(own) != 1:
        sys.exit(f"seed.py: cannot find the id of the harness key among {len(keys['items'])} keys")
    out["SLUICE_KEY_ID"] = own[0]

    # Two sign-ins: the session for the session run, and a refresh token of another family for
    # `POST /v1/auth/refresh` (its first use rotates it, a replay revokes its family: not the
    # session run's).
    for name, cookie in (("SLUICE_SESSION", "sluice_session"), ("SLUICE_REFRESH", "sluice_refresh")):
        _, headers = call(base, "POST", "/v1/auth/login", None, {"email": email, "password": password})
        cookies = http.cookies.SimpleCookie()
        for header in headers.get_all("Set-Cookie") or []:
            cookies.load(header)
        if cookie not in cookies:
            sys.exit(f"seed.py: signing in set no {cookie} cookie")
        out[name] = cookies[cookie].value

    for name, value in out.items():
        print(f"export {name}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
