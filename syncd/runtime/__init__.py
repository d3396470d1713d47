"""The asyncio plumbing every layer uses: owned, supervised tasks (:mod:`~syncd.runtime.tasks`),
requests-first pacing of background work (:mod:`~syncd.runtime.pacing`), waiting out an
unavailable backend (:mod:`~syncd.runtime.outage`) and the change feed the pipeline, the
workers and the service notify (:mod:`~syncd.runtime.changes`)."""
