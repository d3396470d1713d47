"""The asyncio plumbing every layer uses: owned, supervised tasks (:mod:`~syncd.runtime.tasks`)
and requests-first pacing of background work (:mod:`~syncd.runtime.pacing`)."""
