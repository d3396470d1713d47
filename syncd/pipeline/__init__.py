"""A sync run (DESIGN.md §4): the engine (:mod:`~syncd.pipeline.engine`: claim → paginate →
per-page commit → enqueue), the preparation of each page's records in slices of loop time
(:mod:`~syncd.pipeline.prepare`) and what a record becomes — external id, content hash,
payload (:mod:`~syncd.pipeline.inputs`)."""
