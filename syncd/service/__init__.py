"""The connector operations and the changes they announce.

:mod:`~syncd.service.operations` (:class:`~syncd.service.operations.ConnectorService`: what
the control API and an embedding application can do), :mod:`~syncd.service.preview` (the
first pages of a connector, nothing stored), :mod:`~syncd.service.control` (the control
messages between instances), :mod:`~syncd.service.cursors` (list cursors),
:mod:`~syncd.service.changes` (the change feed every layer notifies) and
:mod:`~syncd.service.events` (``GET /events``).

Nothing is re-exported here: the sync engine and the workers import
:mod:`~syncd.service.changes`, and an import of the operations from this package would
bring the engine back in while it is being imported.
"""
