"""Schema post-processing: every operation documents the errors it can answer with.

DRF answers 400 with `{field: [message]}` and 401/403/404/409/413/415/429 with
`{"detail": message}`; clients (and schemathesis) can rely on both.
"""

ERRORS = {
    "400": ("Refused: each field at fault with its messages.", "ValidationErrors"),
    "401": ("Not authenticated.", "Detail"),
    "403": ("Not allowed for this user or token.", "Detail"),
    "404": ("Not found, or not visible to this user.", "Detail"),
    "409": ("Conflicts with the current state (e.g. the job already ended).", "Detail"),
    "413": ("The request body is over the size limit (named in the message).", "Detail"),
    "415": ("The body's media type or charset is not one the API reads.", "Detail"),
    "429": ("Throttled, or logins locked after too many failures (Retry-After says for how long).", "Detail"),
}
SCHEMAS = {
    "Detail": {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]},
    "ValidationErrors": {
        "type": "object",
        "additionalProperties": {
            "oneOf": [
                {"type": "array", "items": {}},
                {"type": "string"},
                {"type": "object"},
            ]
        },
    },
}


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {}).update(SCHEMAS)
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            responses = operation.setdefault("responses", {})
            for code, (description, schema) in ERRORS.items():
                responses.setdefault(code, {
                    "description": description,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
                })
    return result
