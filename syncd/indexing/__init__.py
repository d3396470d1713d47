"""Indexing (DESIGN.md §7): the workers and their lease sweeper (:mod:`~syncd.indexing.workers`),
one claimed batch's run through its indexer (:mod:`~syncd.indexing.batch`), and the
housekeeping that keeps queue and store consistent — queue repair and delete cascades
(:mod:`~syncd.indexing.maintenance`)."""
