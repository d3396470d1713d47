"""The components of the OpenAPI document: the schemas of the bodies the control API answers
and takes (besides the connector bodies, which the connector model generates) and the
query parameters its routes share.

:mod:`syncd.api.openapi` assembles the document: the paths and operations of the route
table, which name these components.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from syncd.models import CrawlMode, WaitReason
from syncd.schema.steering import MARK_SCHEMA, StateUpdate, SyncRequest
from syncd.service.cursors import CURSOR_MAX_LENGTH, CURSOR_PATTERN

__all__ = ["CONNECTOR_EXAMPLE", "PARAMETERS", "SCHEMAS", "ref"]


def ref(name: str) -> dict[str, str]:
    """A reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


_TIME = {"type": ["string", "null"], "format": "date-time"}
_STR_OR_NULL = {"type": ["string", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_CONNECTOR_STATUS = ["active", "paused", "error", "deleting"]
_DOC_STATUS = ["pending", "running", "indexed", "failed", "deleted"]
_CRAWL_MODES = [m.value for m in CrawlMode]
# A backfill's bound (null for another mode).
_BOUND = {"oneOf": [{"type": "null"}, *MARK_SCHEMA["oneOf"]]}

#: The example of a connector body shown in the description (the README's quick tour).
CONNECTOR_EXAMPLE: dict[str, Any] = {
    "name": "tickets",
    "source": {
        "type": "http",
        "url": "http://127.0.0.1:9000/items",
        "params": {"limit": 100},
        "headers": {"Authorization": "Bearer ${env:TICKETS_TOKEN}"},
        "records": "data",
        "id_field": "id",
        "pagination": {
            "type": "cursor",
            "cursor_param": "cursor",
            "next_cursor": "next_cursor",
        },
    },
    "indexer": {"type": "store"},
    "sync_schedule": "*/15 * * * *",
    "page_retries": 3,
    "page_retry_backoff": 2.0,
    "throttle_seconds": 0.0,
    "retry_on_status": [502, 503, 504],
}


def _page_of(item: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["data", "next_cursor"],
        "properties": {"data": {"type": "array", "items": ref(item)}, "next_cursor": _STR_OR_NULL},
    }


def _object(properties: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(properties), "properties": dict(properties), **extra}


_LOOP_LAG = {
    "type": "number",
    "minimum": 0,
    "description": "The worst lag of the instance's event loop over the last 15 s, in seconds "
    "(what `syncd_event_loop_lag_seconds` holds): how long every request and run waited too",
}

_INSTANCE = {
    "instance_id": {"type": "string"},
    "owner": {"type": "string"},
    "version": {"type": "string"},
    "started_at": {"type": "string", "format": "date-time"},
    "heartbeat_at": _TIME,
    "running_syncs": _COUNT,
    "workers": ref("Workers"),
}

SCHEMAS: dict[str, Any] = {
    "Error": _object({"detail": {"type": "string"}}),
    "Conflict": {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {"type": "string"},
            "run_id": {
                "type": "string",
                "description": "The running run, with `Sync already in progress`.",
            },
        },
    },
    "ValidationError": _object(
        {
            "detail": {
                "type": "array",
                "items": _object(
                    {
                        "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                        "msg": {"type": "string"},
                    }
                ),
            }
        }
    ),
    "Connector": _object(
        {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "status": {"enum": _CONNECTOR_STATUS},
            "sync_status": {"enum": ["idle", "running", "queued"]},
            "last_error": _STR_OR_NULL,
            "run_id": _STR_OR_NULL,
            "sync_started_at": _TIME,
            "sync_queued_at": {
                **_TIME,
                "description": "When a manual trigger found no free run slot and queued.",
            },
            "last_synced_at": _TIME,
            "sync_schedule": _STR_OR_NULL,
            "sync_timezone": _STR_OR_NULL,
            "next_run_at": _TIME,
            "failures": {
                **_COUNT,
                "description": "Failed runs in a row (0 after a successful run; a manual "
                "trigger starts a new count).",
            },
            "retry_at": {
                **_TIME,
                "description": "When the automatic retry of the last failed run is due (null: "
                "none pending, e.g. `retry_attempts` used up).",
            },
            "created_at": _TIME,
            "updated_at": _TIME,
            "source": {
                "type": "object",
                "description": 'Secrets are shown as "***". `auth` shows its shape (`type`, '
                "`in`, `name`, `grant`, `token_url`, `scopes`, `audience`, `client_auth`, the "
                'names in `extra`); every other value of it, and any reference, is "***".',
            },
            "indexer": {"type": "object", "description": 'Secrets are shown as "***".'},
            "page_retries": {"type": "integer"},
            "page_retry_backoff": {"type": "number"},
            "throttle_seconds": {"type": "number"},
            "retry_on_status": {"type": "array", "items": {"type": "integer"}},
            "hash_fields": {"type": ["array", "null"], "items": {"type": "string"}},
            "retry_attempts": {"type": "integer", "minimum": 0},
            "retry_backoff": {"type": "number", "minimum": 0},
            "document": {
                "type": ["object", "null"],
                "description": "The document mapping, as written (see the connector file "
                "reference).",
            },
            "prune": {"type": "boolean"},
            "prune_max_fraction": {"type": "number", "minimum": 0, "maximum": 1},
            "prune_confirmations": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 100,
                "description": "Complete full crawls in a row that must miss a document "
                "before it is deleted, as set; null: the default of the source's pagination "
                "(2 for `offset`, `page` and `shifts: true`, else 1).",
            },
            "full_crawl_schedule": _STR_OR_NULL,
            "deletions_held": {
                **_COUNT,
                "description": "Deletions the guard held after the last completed crawl "
                "(apply them with `POST /connectors/{id}/deletions/apply`).",
            },
            "documents_awaiting_confirmation": {
                **_COUNT,
                "description": "Live documents the last complete full crawl did not see that "
                "fewer than `prune_confirmations` crawls in a row have missed: kept until "
                "enough crawls confirm them gone, or until one sees them again. Counted at "
                "that crawl's end.",
            },
            "progress": _object({"pages": _COUNT, "documents": _COUNT}),
            "waiting": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "reason": {"enum": [m.value for m in WaitReason]},
                            "until": {"type": "string", "format": "date-time"},
                        }
                    ),
                ]
            },
            "sync_owner": _STR_OR_NULL,
            "sync_heartbeat_at": _TIME,
            "documents": _object(dict.fromkeys(_DOC_STATUS, _COUNT)),
        }
    ),
    "ConnectorList": _page_of("Connector"),
    "Run": _object(
        {
            "id": {"type": "string"},
            "connector_id": {"type": "string"},
            "trigger": {"enum": ["manual", "schedule", "stale_lock", "retry"]},
            "attempt": {
                "type": "integer",
                "minimum": 1,
                "description": "1 for a first try; n for the n-th run in a row after failed "
                "ones (a manual run counts from 1).",
            },
            "outcome": {"enum": ["running", "succeeded", "failed", "aborted", "interrupted"]},
            "started_at": _TIME,
            "finished_at": _TIME,
            "pages": _COUNT,
            "documents_seen": _COUNT,
            "documents_enqueued": _COUNT,
            "documents_rejected": _COUNT,
            "rejections": {
                "type": "array",
                "items": _object(
                    {
                        "page": {"type": ["integer", "null"]},
                        "record": {"type": ["integer", "string"]},
                        "reason": {"type": "string"},
                    }
                ),
            },
            "note": _STR_OR_NULL,
            "error": _STR_OR_NULL,
            "owner": _STR_OR_NULL,
            "deleted": {
                **_COUNT,
                "description": "Documents this run found gone at the source and deleted (or "
                "queued for deletion).",
            },
            "deletions_held": {
                **_COUNT,
                "description": "Deletions the guard held at the end of this run's crawl.",
            },
            "documents_filtered": {
                **_COUNT,
                "description": "Records the source read and left out: a backfill's at or "
                "after the end of its window.",
            },
            "end_reason": {
                **_STR_OR_NULL,
                "description": "The rule that ended this run's crawl (e.g. \"no next cursor "
                "at 'next_cursor'\", \"'has_more' is false\", \"short page (3 of 100), no "
                'total configured", "status 400 past the last page (end_status)", '
                '"max_pages (5) reached"; a plugin source: "the source returned no next '
                'cursor"); null unless the run succeeded.',
            },
            "warnings": {
                "type": "array",
                "items": {"type": "string"},
                "description": "What looks wrong about how the crawl ended: a configured "
                "path absent from every page (a misspelt path). The run still succeeded.",
            },
            "awaiting_confirmation": {
                **_COUNT,
                "description": "Documents this run's complete full crawl did not see that it "
                "left waiting for confirmation (see the connector's "
                "`documents_awaiting_confirmation`).",
            },
        }
    ),
    "RunList": _page_of("Run"),
    "SyncRequest": SyncRequest.model_json_schema(),
    "StateUpdate": StateUpdate.model_json_schema(),
    "CrawlState": _object(
        {
            "connector_id": {"type": "string"},
            "incremental": {
                "type": "boolean",
                "description": "Whether the source has `incremental` (a mark); without it "
                "every crawl is full.",
            },
            "mark": {
                "description": "The completed crawls' mark, as the records hold the "
                "incremental field, before `lag` (null: none; the next crawl reads everything).",
            },
            "mark_set_at": _TIME,
            "mark_set_by": {
                "enum": ["crawl", "user", None],
                "description": "Who set the mark: a completed crawl, or `PUT` (null: unknown, "
                "set before this was recorded, or no mark).",
            },
            "mark_crawl_id": {**_STR_OR_NULL, "description": "The crawl that set the mark."},
            "mark_run_id": {**_STR_OR_NULL, "description": "The run that completed it."},
            "crawl": {
                "oneOf": [
                    {"type": "null"},
                    _object(
                        {
                            "id": _STR_OR_NULL,
                            "mode": {"enum": _CRAWL_MODES},
                            "since": _BOUND,
                            "until": _BOUND,
                            "started_at": _TIME,
                            "resume_cursor_held": {"type": "boolean"},
                        }
                    ),
                ],
                "description": "The crawl begun and not completed (null: none): the next run "
                "without a mode resumes it, in its mode.",
            },
            "next_crawl": _object(
                {
                    "mode": {"enum": _CRAWL_MODES},
                    "since": _BOUND,
                    "until": _BOUND,
                    "resumes": {"type": "boolean"},
                },
                description="What a run started now without a mode would crawl, and whether "
                "it resumes the crawl in progress.",
            ),
            "last_full_crawl_at": {
                **_TIME,
                "description": "When a full crawl last completed (null: not since this was "
                "recorded).",
            },
            "documents_awaiting_confirmation": {
                **_COUNT,
                "description": "Live documents the last complete full crawl missed that wait "
                "for confirmation (the connector's count of the same name).",
            },
        }
    ),
    "Document": _object(
        {
            "external_id": {"type": "string"},
            "status": {"enum": _DOC_STATUS},
            "error": _STR_OR_NULL,
            "content_hash": {"type": "string"},
            "attempts": _COUNT,
            "created_at": _TIME,
            "updated_at": _TIME,
            "indexed_at": _TIME,
            "missed_crawls": {
                **_COUNT,
                "description": "Complete full crawls in a row that did not see this live "
                "document: above 0 it awaits confirmation that it is gone (the connector's "
                "`prune_confirmations`); 0 once a crawl sees it again.",
            },
        }
    ),
    "DocumentWithPayload": {"allOf": [ref("Document"), _object({"payload": {}})]},
    "DocumentList": _page_of("Document"),
    "SyncStarted": _object(
        {
            "connector_id": {"type": "string"},
            "run_id": _STR_OR_NULL,
            "sync_status": {"enum": ["running", "queued"]},
        }
    ),
    "AbortRequested": _object(
        {
            "connector_id": {"type": "string"},
            "run_id": _STR_OR_NULL,
            "status": {"const": "abort_requested"},
        }
    ),
    "Deleting": _object({"connector_id": {"type": "string"}, "status": {"const": "deleting"}}),
    "Requeued": _object({"requeued": _COUNT}),
    "DeletionsApplied": _object(
        {
            "deleting": {
                **_COUNT,
                "description": "Held documents deleted, or queued for deletion through the "
                "indexer.",
            }
        }
    ),
    "PreviewRequest": {
        "type": "object",
        "description": "Exactly one of `connector` (a create body) and `connector_id`.",
        "properties": {
            "connector": ref("ConnectorCreate"),
            "connector_id": {"type": "string"},
            "pages": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
            "timeout_seconds": {"type": "number", "minimum": 1, "maximum": 60, "default": 10},
        },
        "oneOf": [
            {"required": ["connector"], "not": {"required": ["connector_id"]}},
            {"required": ["connector_id"], "not": {"required": ["connector"]}},
        ],
        "additionalProperties": False,
    },
    "Preview": {
        "type": "object",
        "required": ["request", "pages"],
        "properties": {
            "request": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["method", "url", "headers"],
                        "properties": {
                            "method": {"type": "string"},
                            "url": {"type": "string"},
                            "headers": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                            "body": {
                                "type": "object",
                                "description": "The JSON body (secrets masked).",
                            },
                        },
                    },
                ]
            },
            "pages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["records", "ids", "rejected", "next_cursor"],
                    "properties": {
                        "records": _COUNT,
                        "ids": {"type": "array", "items": {"type": "string"}},
                        "rejected": {
                            "type": "array",
                            "items": _object({"index": _COUNT, "reason": {"type": "string"}}),
                        },
                        "next_cursor": _STR_OR_NULL,
                        "reason": {
                            **_STR_OR_NULL,
                            "description": "Why the crawl continues or ends after this page "
                            "(`has_more` is false, next cursor at …); null for a source that "
                            "does not say.",
                        },
                        "warnings": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "Configured paths the first page's response lacks.",
                        },
                        "documents": {
                            "type": "array",
                            "items": {"$ref": "#/components/schemas/DocumentShape"},
                            "description": "With a `document` mapping: each document's "
                            "shape, in `ids` order.",
                        },
                        "new": {"type": "array", "items": {"type": "string"}},
                        "changed": {"type": "array", "items": {"type": "string"}},
                        "unchanged": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
            "error": {
                "type": "string",
                "description": "The source failed or the time limit ended the preview; "
                "`pages` holds the pages fetched before.",
            },
        },
    },
    "DocumentShape": _object(
        {
            "title": _STR_OR_NULL,
            "text": _STR_OR_NULL,
            "url": _STR_OR_NULL,
            "updated_at": _STR_OR_NULL,
            "metadata": {"type": "object"},
        }
    ),
    "Health": _object({"status": {"const": "ok"}}),
    "Readiness": {
        "type": "object",
        "required": ["store", "queue"],
        "properties": {
            "store": {"type": "string", "description": '"ok" or what failed'},
            "queue": {"type": "string", "description": '"ok" or what failed'},
            "tasks": {"type": "string", "description": "Side tasks that died and restart"},
        },
    },
    "OpenAPI": {"type": "object"},
    "Status": _object(
        {
            "version": {"type": "string"},
            "instance_id": {"type": "string"},
            "owner": {"type": "string", "description": "This process incarnation"},
            "started_at": {"type": "string", "format": "date-time"},
            "workers": ref("Workers"),
            "queue": _object({"depth": _COUNT}),
            "running_syncs": {**_COUNT, "description": "Runs executing in this instance"},
            "loop_lag_seconds": _LOOP_LAG,
            "instances": {
                "type": "array",
                "description": "Instances that sent a heartbeat within the last three "
                "heartbeat periods (this one included), by owner",
                # loop_lag_seconds is not required: an earlier version does not report it.
                "items": {
                    **_object(_INSTANCE),
                    "properties": {**_INSTANCE, "loop_lag_seconds": _LOOP_LAG},
                },
            },
        }
    ),
    "Workers": _object(
        {"concurrency": {"type": "integer", "minimum": 1}, "busy": _COUNT},
        description="Indexing workers, and the batches being indexed now",
    ),
}

PARAMETERS: dict[str, Any] = {
    "limit": {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    },
    "cursor": {
        "name": "cursor",
        "in": "query",
        "required": False,
        "description": "The `next_cursor` of the previous page (base64url, unpadded, of a "
        "position that holds no NUL; `~` for the empty one).",
        "schema": {"type": "string", "pattern": CURSOR_PATTERN, "maxLength": CURSOR_MAX_LENGTH},
    },
    "connector_status": {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"enum": _CONNECTOR_STATUS},
    },
    "connector_id_filter": {
        "name": "connector_id",
        "in": "query",
        "required": False,
        "description": "Only these connectors: repeat it, or separate ids with commas (at most "
        "100).",
        "schema": {"type": "array", "items": {"type": "string"}},
        "style": "form",
        "explode": True,
    },
    "last_event_id": {
        "name": "last_event_id",
        "in": "query",
        "required": False,
        "description": "Resume after this event id (as the `Last-Event-ID` header does).",
        "schema": {"type": "string"},
    },
    "document_status": {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"enum": _DOC_STATUS},
    },
}
