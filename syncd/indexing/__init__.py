"""Indexing (DESIGN.md §7): the worker pool (:mod:`~syncd.indexing.workers`), a leased batch's
life — claim, index, renew, hand back (:mod:`~syncd.indexing.lease`) — and its run through its
indexer (:mod:`~syncd.indexing.batch`), and the housekeeping that keeps queue and store
consistent: the lease sweeper and the tombstone purge (:mod:`~syncd.indexing.sweeper`), queue
repair and delete cascades (:mod:`~syncd.indexing.maintenance`)."""
