"""schemathesis hooks for scripts/contract.sh (loaded through SCHEMATHESIS_HOOKS).

1. OpenAPI links, so that the stateful phase takes ids from real creates: each create's 201 links
   to every operation on the created resource. A link the document already declares (same name)
   is kept as it is; these only fill in what it lacks.
2. Destructive operations get a fresh resource for every request: schemathesis.toml binds their
   `{id}` to a placeholder (`fresh-stream`, `fresh-webhook`…) that `before_call` replaces with a
   resource it has just created. Bound to the shared seed instead, the first DELETE would leave
   every later request of the phase (and of the next phases) a 404 or a 409 that tests nothing.
3. A VOD ladder's rung names must be unique, which JSON Schema cannot say (`uniqueItems` covers
   identical rungs only; the rule is in the field's description): a generated ladder that repeats
   a name gets the repeats renamed before it is sent. schemathesis revalidates a case a hook has
   changed, so it still knows whether the request is valid or not.
4. `POST /v1/auth/refresh` gets a real refresh cookie (seed.py), so it is not only ever 401.
5. The harness's own credential is not the fuzzer's to revoke: `DELETE …/api-keys/{id}` is never
   sent with the id of the key that authenticates the run (SLUICE_KEY_ID; it goes to an id that
   does not exist, a 404), or every later request would be a 401 and test nothing. Any other key,
   including the ones the run creates, is fair game.
6. A valid `Idempotency-Key` is made unique per request (a counter replaces its tail, so it stays
   1–255 printable characters): the generators draw the same boundary keys for many requests with
   other bodies, which the server rightly answers 422, and nothing else of those requests would be
   tested. Invalid keys are sent as generated.
7. `PUT …/streams/{id}/slate` needs no hook: for its `image/jpeg` and `image/png` bodies
   schemathesis sends real pictures (its file samples, 1×1) as valid data. Its DELETE gets a fresh
   stream (schemathesis.toml), so the seed stream keeps the picture seed.py gave it and
   `GET …/slate` on it answers 200 (404 is the default card).
8. `DELETE …/simulcast-targets/{tid}` gets a fresh stream with a fresh target (`fresh-target`:
   both path parameters at once), and `POST …/simulcast-targets` a fresh stream (`fresh-stream`),
   so that its 10-target limit never turns the run into 409s.
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from typing import Any

import requests
import schemathesis

SLUG = "$request.path.slug"
REVOKE = "DELETE /v1/projects/{slug}/api-keys/{id}"
REFRESH = "POST /v1/auth/refresh"
CREATE_VOD = "POST /v1/projects/{slug}/vod"

# (operation that creates, its status, JSON pointer of the new id in its body, id parameter name,
#  operations on the created resource)
LINKS: list[tuple[str, str, str, str, list[str]]] = [
    (
        "createStream",
        "201",
        "/_id",
        "id",
        [
            "getStream",
            "updateStream",
            "deleteStream",
            "rotateStreamPush",
            "setStreamSignedPlayback",
            "createStreamPlaybackTicket",
            "putStreamSlate",
            "getStreamSlate",
            "deleteStreamSlate",
            "createSimulcastTarget",
            "listSimulcastTargets",
        ],
    ),
    (
        "createVod",
        "201",
        "/vod/_id",
        "id",
        [
            "getVod",
            "deleteVod",
            "markVodUploaded",
            "vodUploadHeartbeat",
            "setVodSignedPlayback",
            "createVodPlaybackTicket",
        ],
    ),
    ("createWebhook", "201", "/_id", "id", ["getWebhook", "updateWebhook", "deleteWebhook", "testWebhook"]),
    ("testWebhook", "201", "/_id", "id", ["redeliverWebhookDelivery"]),
    ("redeliverWebhookDelivery", "200", "/_id", "id", ["redeliverWebhookDelivery"]),
    ("createApiKey", "201", "/_id", "id", ["revokeApiKey"]),
    ("addMember", "201", "/_id", "user_id", ["updateMember", "removeMember"]),
]

# Operations whose id is the webhook's, reached from a delivery record (`webhookId`).
EXTRA: list[tuple[str, str, str, dict[str, str]]] = [
    ("testWebhook", "201", "getWebhook", {"slug": SLUG, "id": "$response.body#/webhookId"}),
    ("createWebhook", "201", "listWebhookDeliveries", {"slug": SLUG, "webhookId": "$response.body#/_id"}),
    # A simulcast target is named by its stream and its own id.
    *(
        ("createSimulcastTarget", "201", target, {"slug": SLUG, "id": "$response.body#/streamId", "tid": "$response.body#/_id"})
        for target in ("updateSimulcastTarget", "deleteSimulcastTarget")
    ),
]


def _operations(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for item in raw.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                found[operation["operationId"]] = operation
    return found


def _add(raw_ops: dict[str, dict[str, Any]], source: str, status: str, target: str, parameters: dict[str, str]) -> None:
    if source not in raw_ops or target not in raw_ops:
        return
    response = raw_ops[source].get("responses", {}).get(status)
    if response is None or "$ref" in response:
        return
    links = response.setdefault("links", {})
    links.setdefault(f"{target[0].upper()}{target[1:]}", {"operationId": target, "parameters": parameters})


@schemathesis.hook
def before_load_schema(context: Any, raw_schema: dict[str, Any]) -> None:
    raw_ops = _operations(raw_schema)
    for source, status, pointer, name, targets in LINKS:
        for target in targets:
            _add(raw_ops, source, status, target, {"slug": SLUG, name: f"$response.body#{pointer}"})
    for source, status, target, parameters in EXTRA:
        _add(raw_ops, source, status, target, parameters)


def _api(method: str, path: str, body: Any = None) -> Any:
    base = os.environ["SLUICE_URL"]
    url = path if path.startswith("http") else f"{base}/v1/projects/{os.environ['SLUICE_PROJECT']}{path}"
    response = requests.request(
        method, url, json=body, timeout=30, headers={"Authorization": f"Bearer {os.environ['SLUICE_KEY']}"}
    )
    response.raise_for_status()
    return response.json()


def _fresh_vod_with_junk() -> str:
    """A VOD whose upload has landed but is not media: `uploaded` answers 200 and fails it."""
    created = _api("POST", "/vod", {"name": f"contract-fresh-{uuid.uuid4().hex[:8]}", "filename": "junk.mp4"})
    upload = created["upload"]
    requests.request(upload["method"], upload["url"], data=b"this is not a media file", timeout=30).raise_for_status()
    return created["vod"]["_id"]


def _fresh_target() -> tuple[str, str]:
    """A stream of its own with one simulcast target: (stream id, target id)."""
    stream = _api("POST", "/streams", {"name": f"contract-fresh-{uuid.uuid4().hex[:8]}"})["_id"]
    target = _api("POST", f"/streams/{stream}/simulcast-targets", {"url": "rtmp://203.0.113.7/live/contract-key"})
    return stream, target["_id"]


FRESH = {
    "fresh-stream": lambda: _api("POST", "/streams", {"name": f"contract-fresh-{uuid.uuid4().hex[:8]}"})["_id"],
    "fresh-vod": lambda: _api("POST", "/vod", {"name": "contract-fresh", "filename": "fresh.mp4"})["vod"]["_id"],
    "fresh-vod-junk": _fresh_vod_with_junk,
    "fresh-webhook": lambda: _api("POST", "/webhooks", {"url": "http://127.0.0.1:9/contract", "events": ["*"]})["_id"],
    "fresh-key": lambda: _api("POST", "/api-keys", {"label": "contract-fresh", "scopes": ["streams:read"]})["_id"],
    "fresh-member": lambda: _api(
        "POST", "/members", {"email": f"contract-{uuid.uuid4().hex[:12]}@example.com", "role": "viewer"}
    )["_id"],
}


def _rename_repeated_rungs(ladder: Any) -> None:
    if not isinstance(ladder, list):
        return
    names = {rung["name"] for rung in ladder if isinstance(rung, dict) and isinstance(rung.get("name"), str)}
    seen: set[str] = set()
    for rung in ladder:
        if not isinstance(rung, dict) or not isinstance(rung.get("name"), str):
            continue
        if rung["name"] in seen:
            rung["name"] = next(f"rung{i}" for i in range(len(ladder) + 1) if f"rung{i}" not in names)
            names.add(rung["name"])
        seen.add(rung["name"])


_KEYS = itertools.count()


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    parameters = case.path_parameters or {}
    if parameters.get("tid") == "fresh-target":
        parameters["id"], parameters["tid"] = _fresh_target()
    for name, value in parameters.items():
        if isinstance(value, str) and value in FRESH:
            parameters[name] = FRESH[value]()
    if case.operation.label == CREATE_VOD and isinstance(case.body, dict):
        _rename_repeated_rungs(case.body.get("ladder"))
    # The refresh token travels in a cookie the document does not declare as a parameter (it is
    # not a credential scheme either); seed.py signed in once for it. Its first use rotates it,
    # replays are refused (401): both are what this operation must answer.
    refresh = os.environ.get("SLUICE_REFRESH")
    if refresh and case.operation.label == REFRESH:
        case.cookies = {**(case.cookies or {}), "sluice_refresh": refresh}
    headers = case.headers or {}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and re.fullmatch(r"[ -~]{1,255}", key):
        suffix = f"-{next(_KEYS)}"
        headers["Idempotency-Key"] = key[: 255 - len(suffix)] + suffix
    own = os.environ.get("SLUICE_KEY_ID")
    if own and case.operation.label == REVOKE and (case.path_parameters or {}).get("id") == own:
        case.path_parameters["id"] = "not-the-harness-key"
