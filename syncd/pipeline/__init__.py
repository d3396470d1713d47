"""A sync run (DESIGN.md §4): the engine (:mod:`~syncd.pipeline.engine`: this instance's runs,
started, aborted, stopped), one run's body (:mod:`~syncd.pipeline.run`: claim → paginate →
per-page commit → enqueue), the run slots every run starts in (:mod:`~syncd.pipeline.admission`),
building a connector's source and its paginator (:mod:`~syncd.pipeline.builder`), a run's pages
on their way to the commit (:mod:`~syncd.pipeline.pages`: read ahead, the resume guard) and the
preparation of each page's records in slices of loop time (:mod:`~syncd.pipeline.prepare`; what
a record becomes is a rule, :mod:`~syncd.rules.records`)."""
