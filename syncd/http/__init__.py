"""The fetch layer: the HTTP transport (:mod:`~syncd.http.transport`), the cursor paginator
(:mod:`~syncd.http.paginator`), Retry-After parsing, timeouts, the private-address guard, URLs
fit for messages, and the per-host budgets and rate limits. Import each from its module (the
paginator is also part of the package root's API: ``syncd.AsyncCursorPaginator``)."""
